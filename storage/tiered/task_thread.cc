#include "storage/tiered/task_thread.h"

#include <utility>

namespace strata::storage {

TaskThread::TaskThread(std::string name, int nice)
    : worker_({.thread_name = std::move(name), .nice = nice}, &TaskThread::RunAll) {}

bool TaskThread::Submit(Task task, bool urgent) {
  // A refused task is destroyed unrun, here.
  return worker_.Push(std::move(task), urgent);
}

void TaskThread::RunAll(std::span<Task> tasks) {
  for (Task& task : tasks) std::move(task)();
}

}  // namespace strata::storage
