// PumpedWriteReactor: a server-streaming reactor that sends its responses one at a time, as they
// become available, the shared machinery of stratad's WatchEvents (daemon/watch_events_reactor)
// and strata-controller's (controller/service/cluster_watch_reactor). A subclass says what comes
// next (Next); Pump sends it when no write is in flight (the first response always goes, even with
// nothing in it: the stream is open), and is called again by the subclass when
// something new arrives (its source's wake-up), by OnWriteDone after each write, and finishes the
// stream on Next's error, on a broken write, or on cancellation.
//
// Thread-safety: gRPC callbacks and the subclass's wake-ups may call Pump concurrently; the state
// is behind the reactor's own mutex, never held while calling into gRPC (which may run callbacks
// inline from StartWrite and Finish). Next runs under that mutex. The subclass deletes itself in
// OnDone.
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_callback.h"
#include "proto/convert.h"

namespace strata::control {

template <class Response>
class PumpedWriteReactor : public grpc::ServerWriteReactor<Response> {
 public:
  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) cancelled_ = true;  // the stream is broken: finish
    }
    Pump();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
      if (writing_ || finished_) return;  // OnWriteDone finishes
      finished_ = true;
    }
    this->Finish(grpc::Status::CANCELLED);
  }

 protected:
  // Fills `response` (cleared) with the next one: true when it carries something new, false when
  // nothing is ready (it is sent anyway as the stream's first response; otherwise Pump is called
  // again later), or the error that finishes the stream. Runs under the lock.
  virtual absl::StatusOr<bool> Next(Response& response) = 0;

  void Pump() {
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (cancelled_) {
        finish = grpc::Status::CANCELLED;
      } else {
        response_.Clear();
        absl::StatusOr<bool> ready = Next(response_);
        if (!ready.ok()) {
          finish = ToGrpcStatus(ready.status());
        } else if (!*ready && sent_first_) {
          return;
        } else {
          writing_ = true;
          sent_first_ = true;
        }
      }
      if (finish.has_value()) finished_ = true;
    }
    if (finish.has_value()) {
      this->Finish(*finish);
    } else {
      this->StartWrite(&response_);  // response_ is left alone until OnWriteDone
    }
  }

 private:
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool sent_first_ ABSL_GUARDED_BY(mu_) = false;
  // Written under mu_ only while no write is in flight; read by gRPC during the write.
  Response response_;
};

}  // namespace strata::control
