// A gRPC channel to a process that may restart (a daemon, a controller, an etcd member): dialled
// again within a second of its return rather than after gRPC's default reconnect backoff, which
// grows to two minutes. Shared by every client of the cluster's processes. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"

namespace strata::control {

std::shared_ptr<grpc::Channel> CreateRedialingChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials);

}  // namespace strata::control
