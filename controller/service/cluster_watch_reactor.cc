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
  return !response.batches().empty();  // when empty, Wake calls Pump again
}

void ClusterWatchReactor::OnDone() {
  hub_->Remove(this);
  delete this;
}

}  // namespace strata::controller
