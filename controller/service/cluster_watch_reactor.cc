#include "controller/service/cluster_watch_reactor.h"

namespace strata::controller {

ClusterWatchReactor::ClusterWatchReactor(EventHub* hub) : hub_(hub) {
  hub_->Add(this);
  Pump();
}

absl::StatusOr<bool> ClusterWatchReactor::Next(v1::ClusterWatchResponse& response) {
  if (absl::Status taken = hub_->Take(this, kMaxBatchesPerResponse, response); !taken.ok()) {
    return taken;
  }
  if (response.batches().empty() && sent_first_) return false;  // Wake calls Pump again
  sent_first_ = true;
  return true;
}

void ClusterWatchReactor::OnDone() {
  hub_->Remove(this);
  delete this;
}

}  // namespace strata::controller
