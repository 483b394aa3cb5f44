// BackgroundWorker<Item> is the skeleton every background thread of the store is made of: a
// queue, its counters, Flush and Stop, one owned and named thread. The demoter, the promoter,
// write-through and the store's task threads (TaskThread) each are one of these plus what they do
// with an item.
//
// Push queues an item; an `urgent` one is taken ahead of every normal item (behind the urgent ones
// before it). The thread takes up to max_batch items of one lane at a time and hands them to
// `process`, with no lock held. Flush returns once every item pushed before it is processed (or
// dropped). DropQueued drops what is queued but not yet taken, handing it to `dropped`;
// DropQueuedIf drops those a predicate selects and waits for the batch in progress. Stop runs
// or drops what is queued (on_stop), waits for the batch in progress and joins; Push refuses from
// then on. SetHeld(true) keeps the thread from taking items until a Flush or Stop asks for them
// (tests use it to keep work queued).
//
// Thread-safety: every method is thread-safe. `process` runs on the worker's thread alone;
// `dropped` runs on the thread that called DropQueued or Stop. Neither is called with the
// worker's lock held, so both may lock their owner's mutex, and the owner may call Push with its
// own mutex held (lock order: owner, then worker). `process` must not call Flush or Stop (it
// would wait for itself).
//
// Lifetime: the destructor stops. The callbacks must not outlive what they reference: an owner
// declares its worker after the members the callbacks use (destroyed first), or stops it first.
#pragma once

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"

namespace strata::storage {

// How much nicer than the session thread the store's threads run whose work is not a host hit
// (loads past a host miss, prefetches, write-through): under CPU contention the microsecond
// requests go first (shortest job first); otherwise it changes nothing.
inline constexpr int kBackgroundNice = 5;

struct BackgroundWorkerOptions {
  enum class OnStop {
    kRunQueued,   // Stop processes what is queued (nothing accepted is lost)
    kDropQueued,  // Stop drops what is queued (hints: prefetches, best-effort writes)
  };
  // The thread's name (at most 15 characters: the kernel's limit).
  std::string thread_name;
  // Most items handed to one `process` call; at least 1.
  uint32_t max_batch = 1;
  // Most items queued (not counting the batch in progress); a Push past it is refused.
  uint64_t max_queued = std::numeric_limits<uint64_t>::max();
  OnStop on_stop = OnStop::kRunQueued;
  // Added to the thread's nice value (0: as inherited). Work nobody waits on at once runs nicer
  // than the session thread, so that an engine's host hits are not queued behind it for a CPU.
  int nice = 0;
};

template <typename Item>
class BackgroundWorker {
 public:
  using Process = absl::AnyInvocable<void(std::span<Item>)>;
  using Dropped = absl::AnyInvocable<void(std::span<Item>)>;

  // Starts the thread. `dropped` may be null.
  BackgroundWorker(BackgroundWorkerOptions options, Process process, Dropped dropped = nullptr)
      : options_(std::move(options)),
        process_(std::move(process)),
        dropped_(std::move(dropped)),
        thread_([this] { Run(); }) {}
  ~BackgroundWorker() { Stop(); }
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

  // Queues `item` and returns true; returns false, leaving `item` as it was, after Stop or when
  // max_queued items are queued.
  bool Push(Item&& item, bool urgent = false) {
    absl::MutexLock lock(&mu_);
    if (stopping_ || urgent_.size() + queue_.size() >= options_.max_queued) return false;
    const uint64_t seq = ++pushed_;
    unfinished_.insert(seq);
    (urgent ? urgent_ : queue_).push_back({seq, std::move(item)});
    return true;
  }

  // Returns once every item pushed before the call is processed or dropped, held or not.
  void Flush() {
    absl::MutexLock lock(&mu_);
    const uint64_t target = pushed_;
    flush_target_ = std::max(flush_target_, target);
    struct Arg {
      BackgroundWorker* worker;
      uint64_t target;
    } arg{this, target};
    // Urgent items overtake normal ones, so "every item up to the target" is not a count.
    mu_.Await(absl::Condition(
        +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return a->worker->unfinished_.empty() || *a->worker->unfinished_.begin() > a->target;
        },
        &arg));
  }

  // While held, the thread takes only items a Flush waits for (or all, once stopping).
  void SetHeld(bool held) {
    absl::MutexLock lock(&mu_);
    held_ = held;
  }

  // Drops every item queued and not yet taken; returns how many.
  uint64_t DropQueued() {
    Taken doomed;
    {
      absl::MutexLock lock(&mu_);
      doomed = TakeQueued();
    }
    return Drop(std::move(doomed));
  }

  // Drops every queued item `doomed` selects (handing them to `dropped`), then waits for the
  // batch in progress, if any, to be processed: on return, no item pushed before the call that
  // `doomed` selects is queued or being processed. Returns how many were dropped.
  uint64_t DropQueuedIf(absl::FunctionRef<bool(const Item&)> doomed) {
    Taken taken;
    uint64_t batch_in_progress = 0;
    {
      absl::MutexLock lock(&mu_);
      for (std::deque<Queued>* lane : {&urgent_, &queue_}) {
        std::deque<Queued> kept;
        for (Queued& queued : *lane) {
          if (doomed(queued.item)) {
            taken.Add(std::move(queued));
          } else {
            kept.push_back(std::move(queued));
          }
        }
        lane->swap(kept);
      }
      batch_in_progress = batches_taken_ > batches_done_ ? batches_taken_ : 0;
    }
    const uint64_t dropped = Drop(std::move(taken));
    if (batch_in_progress != 0) {
      struct Arg {
        BackgroundWorker* worker;
        uint64_t batch;
      } arg{this, batch_in_progress};
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Arg* a)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->worker->batches_done_ >= a->batch; },
          &arg));
    }
    return dropped;
  }

  // Refuses further pushes, runs or drops what is queued (options.on_stop), waits for the batch
  // in progress and joins the thread. Idempotent.
  void Stop() {
    Taken doomed;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      if (options_.on_stop == BackgroundWorkerOptions::OnStop::kDropQueued) doomed = TakeQueued();
    }
    Drop(std::move(doomed));
    if (thread_.joinable()) thread_.join();
  }

  // Items ever accepted by Push.
  uint64_t pushed() const {
    absl::MutexLock lock(&mu_);
    return pushed_;
  }
  // Items queued or being processed now.
  uint64_t pending() const {
    absl::MutexLock lock(&mu_);
    return unfinished_.size();
  }

 private:
  struct Queued {
    uint64_t seq = 0;  // 1, 2, ... in push order
    Item item;
  };
  // Items taken off the queue (to process or to drop), apart from their sequence numbers.
  struct Taken {
    std::vector<uint64_t> seqs;
    std::vector<Item> items;

    void Add(Queued&& queued) {
      seqs.push_back(queued.seq);
      items.push_back(std::move(queued.item));
    }
  };

  // Adds `increment` to the calling thread's nice value (Linux threads have their own: the one
  // inherited from the thread that made it). A refusal leaves it as it was.
  static void Renice(int increment) {
    const id_t tid = static_cast<id_t>(gettid());
    errno = 0;
    const int inherited = getpriority(PRIO_PROCESS, tid);
    if (errno == 0) setpriority(PRIO_PROCESS, tid, std::clamp(inherited + increment, -20, 19));
  }

  Taken TakeQueued() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Taken taken;
    for (std::deque<Queued>* lane : {&urgent_, &queue_}) {
      for (Queued& queued : *lane) taken.Add(std::move(queued));
      lane->clear();
    }
    return taken;
  }

  // Counts `seqs` finished (and clears them).
  void Finish(std::vector<uint64_t>& seqs) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (uint64_t seq : seqs) unfinished_.erase(seq);
    seqs.clear();
  }

  // Hands `doomed` (taken from the queue) to `dropped_`, then counts it finished.
  uint64_t Drop(Taken doomed) ABSL_LOCKS_EXCLUDED(mu_) {
    const uint64_t count = doomed.seqs.size();
    if (count == 0) return 0;
    if (dropped_ != nullptr) dropped_(std::span(doomed.items));
    Finish(doomed.seqs);
    return count;
  }

  // The lane the thread takes from next, or null when it may take nothing now.
  std::deque<Queued>* NextLane() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::deque<Queued>* lane = urgent_.empty() ? &queue_ : &urgent_;
    if (lane->empty()) return nullptr;
    if (held_ && !stopping_ && lane->front().seq > flush_target_) return nullptr;
    return lane;
  }

  void Run() {
    pthread_setname_np(pthread_self(), options_.thread_name.substr(0, 15).c_str());
    if (options_.nice != 0) Renice(options_.nice);
    Taken batch;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](BackgroundWorker* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
              return w->NextLane() != nullptr ||
                     (w->stopping_ && w->urgent_.empty() && w->queue_.empty());
            },
            this));
        std::deque<Queued>* lane = NextLane();
        if (lane == nullptr) return;  // stopping, and everything queued is done or dropped
        while (!lane->empty() && batch.seqs.size() < options_.max_batch) {
          batch.Add(std::move(lane->front()));
          lane->pop_front();
        }
        ++batches_taken_;
      }
      process_(std::span(batch.items));
      batch.items.clear();
      absl::MutexLock lock(&mu_);
      for (uint64_t seq : batch.seqs) unfinished_.erase(seq);
      batch.seqs.clear();
      ++batches_done_;
    }
  }

  const BackgroundWorkerOptions options_;
  Process process_;
  Dropped dropped_;

  mutable absl::Mutex mu_;
  std::deque<Queued> urgent_ ABSL_GUARDED_BY(mu_);  // taken first, in push order
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t pushed_ ABSL_GUARDED_BY(mu_) = 0;  // items ever accepted
  // Sequence numbers of the items queued or being processed.
  std::set<uint64_t> unfinished_ ABSL_GUARDED_BY(mu_);
  // The latest pushed_ a Flush waits for: held items up to it are taken anyway.
  uint64_t flush_target_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches the thread took, and those it finished processing (one at a time).
  uint64_t batches_taken_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t batches_done_ ABSL_GUARDED_BY(mu_) = 0;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  // Last: joined (by Stop) before the members it uses go.
  std::jthread thread_;
};

}  // namespace strata::storage
