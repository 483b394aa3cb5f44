#include "storage/tiered/task_thread.h"

#include <pthread.h>

#include <utility>

namespace strata::storage {

TaskThread::TaskThread(std::string name) : name_(std::move(name)), worker_([this] { Run(); }) {}

TaskThread::~TaskThread() { Stop(); }

bool TaskThread::Submit(Task task, bool urgent) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return false;
  const uint64_t seq = ++submitted_;
  unfinished_.insert(seq);
  (urgent ? urgent_ : queue_).push_back({seq, std::move(task)});
  return true;
}

void TaskThread::Flush() {
  absl::MutexLock lock(&mu_);
  struct Arg {
    TaskThread* thread;
    uint64_t target;
  } arg{this, submitted_};
  // Urgent tasks overtake normal ones, so "every task up to the target" is not a count.
  mu_.Await(absl::Condition(
      +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return a->thread->unfinished_.empty() || *a->thread->unfinished_.begin() > a->target;
      },
      &arg));
}

void TaskThread::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

uint64_t TaskThread::pending() const {
  absl::MutexLock lock(&mu_);
  return unfinished_.size();
}

void TaskThread::Run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  for (;;) {
    Queued next;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](TaskThread* t) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return !t->urgent_.empty() || !t->queue_.empty() || t->stopping_;
          },
          this));
      std::deque<Queued>& queue = urgent_.empty() ? queue_ : urgent_;
      if (queue.empty()) return;  // stopping, and everything accepted has run
      next = std::move(queue.front());
      queue.pop_front();
    }
    std::move(next.task)();
    absl::MutexLock lock(&mu_);
    unfinished_.erase(next.seq);
  }
}

}  // namespace strata::storage
