// EventHub: the cluster's KV events on their way to watchers (StrataCluster.WatchEvents). The
// daemons' feeds publish what they apply to the index, as they apply it (one InstanceEvents batch
// per applied response, snapshot, clear or departure); each registered watcher has its own queue
// of batches, which it drains with Take. The hub keeps no history: a watcher sees what is
// published after it registered. A watcher whose queue reaches `max_queued` batches is cut off:
// its queue is dropped and its next Take answers kResourceExhausted (it fell behind).
//
// Threading: every method is thread-safe. Publish wakes the watchers with something to take
// (Watcher::Wake) on the publishing thread, with no hub lock held but its wake lock, which Remove
// also takes: once Remove returns, the watcher is never woken again. Wake may call Take. Lock
// order: the wake lock, then a watcher's own locks, then the hub's queue lock.
#pragma once

#include <cstddef>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "strata/v1/control.pb.h"

namespace strata::controller {

class EventHub {
 public:
  class Watcher {
   public:
    virtual ~Watcher() = default;
    // Something was published for it (or it was cut off).
    virtual void Wake() = 0;
  };

  explicit EventHub(size_t max_queued = 4096) : max_queued_(max_queued) {}

  void Add(Watcher* watcher);
  void Remove(Watcher* watcher);
  void Publish(const v1::InstanceEvents& batch);
  // Moves up to `max_batches` of the watcher's queued batches into `out` (appended), oldest
  // first. kResourceExhausted once it was cut off; kNotFound for a watcher not added.
  absl::Status Take(Watcher* watcher, size_t max_batches, v1::ClusterWatchResponse& out);
  size_t watchers() const;

 private:
  struct Queue {
    std::deque<v1::InstanceEvents> batches;
    bool cut_off = false;
  };

  const size_t max_queued_;
  absl::Mutex wake_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Watcher*, Queue> queues_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::controller
