// ClusterWatchReactor serves one StrataCluster.WatchEvents stream: it registers with the
// EventHub, sends an empty first response (the stream is open: what follows was published after
// it), then the batches queued for it, and sleeps as the hub's watcher when it has caught up. A
// watcher cut off by the hub finishes RESOURCE_EXHAUSTED. It deletes itself when gRPC is done
// with it, unregistering first.
// Thread-safety: as PumpedWriteReactor; its lock is taken after the hub's wake lock and before
// its queue lock.
#pragma once

#include "control/pumped_write_reactor.h"
#include "controller/ingest/event_hub.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::controller {

class ClusterWatchReactor final : public control::PumpedWriteReactor<v1::ClusterWatchResponse>,
                                  public EventHub::Watcher {
 public:
  // At most this many batches per response.
  static constexpr size_t kMaxBatchesPerResponse = 64;

  // `hub` is not owned and must outlive the call.
  explicit ClusterWatchReactor(EventHub* hub);

  void OnDone() override;
  void Wake() override { Pump(); }

 private:
  absl::StatusOr<bool> Next(v1::ClusterWatchResponse& response) override;

  EventHub* const hub_;
};

}  // namespace strata::controller
