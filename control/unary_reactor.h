// Finishing a unary call of a callback gRPC service with an absl::Status, as every handler of
// stratad's StrataControl and strata-controller's StrataCluster does. Thread-safe.
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

}  // namespace strata::control
