// The bearer token that guards a gRPC API over TCP ("authorization: Bearer <token>"), checked by
// the servers (stratad's StrataControl, strata-controller's StrataCluster) and attached by their
// clients. Plain functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/server_callback.h"

namespace strata::control {

// OK when `token` is empty (the API is open), when the caller came over a Unix socket (guarded by
// the socket file's permissions), or when the call carries the token; UNAUTHENTICATED naming
// `server` otherwise. The comparison takes the same time wherever a wrong token differs.
absl::Status CheckBearerToken(const grpc::CallbackServerContext& context, std::string_view token,
                              std::string_view server);

// Adds the token to a call's metadata when it is not empty.
void AttachBearerToken(grpc::ClientContext& context, const std::string& token);

}  // namespace strata::control
