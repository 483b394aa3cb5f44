// WatchEventsReactor serves one WatchEvents stream (proto/strata/v1/control.proto): it sends the
// events of an EventLog from a sequence number on (the first response even when empty), and
// sleeps as the log's waiter when it has caught up. It deletes itself when gRPC is done with it.
// Thread-safety: as PumpedWriteReactor; its lock is taken before the log's.
#pragma once

#include "control/pumped_write_reactor.h"
#include "daemon/event_log.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::daemon {

class WatchEventsReactor final : public control::PumpedWriteReactor<v1::WatchEventsResponse>,
                                 public EventLog::Waiter {
 public:
  // At most this many events per response.
  static constexpr size_t kMaxEventsPerResponse = 256;

  // Starts streaming `log` (not owned; must outlive the call) from `from_sequence`.
  WatchEventsReactor(EventLog* log, uint64_t from_sequence);

  void OnDone() override;
  void Wake() override { Pump(); }

 private:
  absl::StatusOr<bool> Next(v1::WatchEventsResponse& response) override;

  EventLog* const log_;
  // Next's alone (under the reactor's lock).
  uint64_t next_sequence_;
};

}  // namespace strata::daemon
