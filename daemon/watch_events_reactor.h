// WatchEventsReactor serves one WatchEvents stream (proto/strata/v1/control.proto): it sends the
// events of an EventLog from a sequence number on, one response in flight at a time, and
// sleeps as the log's waiter when it has caught up. It deletes itself when gRPC is done with it.
// Thread-safety: gRPC callbacks and the log's notifier may call it concurrently; its state is
// behind its own mutex (taken before the log's; never held while calling into gRPC).
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/event_log.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::daemon {

class WatchEventsReactor final : public grpc::ServerWriteReactor<v1::WatchEventsResponse>,
                                 public EventLog::Waiter {
 public:
  // At most this many events per response.
  static constexpr size_t kMaxEventsPerResponse = 256;

  // Starts streaming `log` (not owned; must outlive the call) from `from_sequence`.
  WatchEventsReactor(EventLog* log, uint64_t from_sequence);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;
  void Wake() override;

 private:
  // Sends the next batch when no write is in flight (the first response even when empty).
  void Pump();

  EventLog* const log_;
  absl::Mutex mu_;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_);
  bool sent_first_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Written under mu_ only while no write is in flight; read by gRPC during the write.
  v1::WatchEventsResponse response_;
};

}  // namespace strata::daemon
