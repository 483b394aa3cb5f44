#include "controller/ingest/event_hub.h"

#include <vector>

#include "fmt/format.h"

namespace strata::controller {

void EventHub::Add(Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  queues_.try_emplace(watcher);
}

void EventHub::Remove(Watcher* watcher) {
  absl::MutexLock wake_lock(&wake_mu_);
  absl::MutexLock lock(&mu_);
  queues_.erase(watcher);
}

void EventHub::Publish(const v1::InstanceEvents& batch) {
  absl::MutexLock wake_lock(&wake_mu_);
  std::vector<Watcher*> woken;
  {
    absl::MutexLock lock(&mu_);
    woken.reserve(queues_.size());
    for (auto& [watcher, queue] : queues_) {
      if (queue.cut_off) continue;
      if (queue.batches.size() >= max_queued_) {
        queue.cut_off = true;
        queue.batches.clear();
      } else {
        queue.batches.push_back(batch);
      }
      woken.push_back(watcher);
    }
  }
  for (Watcher* watcher : woken) watcher->Wake();
}

absl::Status EventHub::Take(Watcher* watcher, size_t max_batches, v1::ClusterWatchResponse& out) {
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(watcher);
  if (it == queues_.end()) return absl::NotFoundError("not a watcher of the cluster's events");
  Queue& queue = it->second;
  if (queue.cut_off) {
    return absl::ResourceExhaustedError(
        fmt::format("this watcher fell {} batches behind the cluster's events; watch again and "
                    "ask Lookup for the state",
                    max_queued_));
  }
  for (size_t i = 0; i < max_batches && !queue.batches.empty(); ++i) {
    *out.add_batches() = std::move(queue.batches.front());
    queue.batches.pop_front();
  }
  return absl::OkStatus();
}

size_t EventHub::watchers() const {
  absl::MutexLock lock(&mu_);
  return queues_.size();
}

}  // namespace strata::controller
