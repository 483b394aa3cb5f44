// TaskThread runs tasks on one owned, named thread, in the order they were submitted: the store's
// threads (promotion, maintenance) are each one of these.
//
// Submit queues a task; an `urgent` one runs ahead of every normal task (a load someone waits for
// runs before a prefetch), behind the urgent ones before it. Flush waits for every task submitted
// before it. Stop runs what is queued, then joins: a task is never dropped once Submit accepted it,
// so a completion callback inside a task always runs. Submit fails (returns false, the task is
// destroyed unrun) from Stop on.
//
// Thread-safety: every method is thread-safe; tasks run on the thread alone. A task must not call
// Flush or Stop of its own thread (it would wait for itself).
//
// Lifetime: the destructor stops. Tasks must not outlive what they reference: the owner stops the
// thread before those go.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/functional/any_invocable.h"
#include "storage/tiered/background_worker.h"

namespace strata::storage {

class TaskThread {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // Starts the thread, named `name` (at most 15 characters: the kernel's limit), at nice value
  // `nice` (BackgroundWorkerOptions::nice).
  explicit TaskThread(std::string name, int nice = 0);

  // Queues `task`; true when it will run. false after Stop (the task is destroyed unrun).
  bool Submit(Task task, bool urgent = false);
  // Returns once every task submitted before the call has run.
  void Flush() { worker_.Flush(); }
  // Runs every queued task, then joins the thread. Idempotent.
  void Stop() { worker_.Stop(); }

  // Tasks queued or running now.
  uint64_t pending() const { return worker_.pending(); }

 private:
  static void RunAll(std::span<Task> tasks);

  BackgroundWorker<Task> worker_;
};

}  // namespace strata::storage
