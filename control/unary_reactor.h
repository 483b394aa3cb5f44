// Finishing a call of a callback gRPC service with an absl::Status at once, as every handler of
// stratad's StrataControl and strata-controller's StrataCluster does when it refuses a call: a
// unary call (FinishUnary), a server-streaming one (RefusedStream). Thread-safe.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/server_callback.h"
#include "proto/convert.h"

namespace strata::control {

// Finishes the call with `status` on the reactor gRPC provides, and returns that reactor.
inline grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                             const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// A server-streaming call's reactor that only finishes it with `status`; deletes itself.
template <class Response>
class RefusedStream final : public grpc::ServerWriteReactor<Response> {
 public:
  explicit RefusedStream(const absl::Status& status) { this->Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace strata::control
