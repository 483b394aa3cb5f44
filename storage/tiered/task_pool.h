// TaskPool runs batches of independent tasks on a few owned, named threads, the caller helping:
// the disk tier's decodes of encoded chunks run on one (DiskLowerTier), so that a promotion's
// reads go on while the chunks read before them decode, on every core the pool has.
//
// A Batch is one caller's set of tasks: Run queues a task, Wait returns once every task of the
// batch has run. While it waits, the caller runs the batch's tasks no thread has taken yet, so a
// pool of 0 threads runs them all in Wait, on the caller, in the order they were queued. Tasks of
// different batches share the threads, first queued first taken.
//
// Thread-safety: every method is thread-safe, but one Batch belongs to one caller. Tasks run on
// the pool's threads or the caller's and must not wait for another batch of the same pool.
//
// Lifetime: a Batch waits in its destructor, so a task never outlives the batch (and what its
// caller lent it). The pool must outlive its batches; its destructor joins its threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

namespace strata::storage {

// This machine's cores, at least 1 and at most `most`: a pool's default size.
inline uint32_t CoresUpTo(uint32_t most) {
  return std::min(most, std::max(1u, std::thread::hardware_concurrency()));
}

class TaskPool {
 public:
  using Task = absl::AnyInvocable<void() &&>;

  // Starts `threads` threads named `name` (at most 15 characters: the kernel's limit).
  TaskPool(std::string name, uint32_t threads);
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  uint32_t threads() const { return static_cast<uint32_t>(threads_.size()); }

  class Batch {
   public:
    explicit Batch(TaskPool& pool) : pool_(pool) {}
    ~Batch() { Wait(); }
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;

    // Queues `task`; a thread of the pool, or the caller in Wait, runs it.
    void Run(Task task);
    // Runs the batch's tasks no thread has taken, then waits for those running elsewhere.
    void Wait();

   private:
    friend class TaskPool;
    TaskPool& pool_;
    uint64_t unfinished_ = 0;  // queued or running; guarded by pool_.mu_
  };

 private:
  struct Queued {
    Batch* batch;
    Task task;
  };

  void Work();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }
  // Runs `queued` with no lock held, then counts it finished.
  void RunOne(Queued queued) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex mu_;
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace strata::storage
