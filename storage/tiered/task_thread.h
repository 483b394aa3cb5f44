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
#include <deque>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace strata::storage {

class TaskThread {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // Starts the thread, named `name` (at most 15 characters: the kernel's limit).
  explicit TaskThread(std::string name);
  ~TaskThread();
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  // Queues `task`; true when it will run. false after Stop (the task is destroyed unrun).
  bool Submit(Task task, bool urgent = false);
  // Returns once every task submitted before the call has run.
  void Flush();
  // Runs every queued task, then joins the thread. Idempotent.
  void Stop();

  // Tasks queued or running now.
  uint64_t pending() const;

 private:
  void Run();

  const std::string name_;
  mutable absl::Mutex mu_;
  struct Queued {
    uint64_t seq = 0;  // 1, 2, ... in submission order
    Task task;
  };

  std::deque<Queued> urgent_ ABSL_GUARDED_BY(mu_);  // run first, in submission order
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;  // tasks ever accepted
  // Sequence numbers of the tasks queued or running.
  std::set<uint64_t> unfinished_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Last: joined (by Stop) before the members it uses go.
  std::jthread worker_;
};

}  // namespace strata::storage
