#include "control/redialing_channel.h"

#include "grpcpp/create_channel.h"

namespace strata::control {
namespace {

constexpr int kMaxReconnectBackoffMs = 1'000;

}  // namespace

std::shared_ptr<grpc::Channel> CreateRedialingChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
  arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs / 4);
  return grpc::CreateCustomChannel(target, credentials, arguments);
}

}  // namespace strata::control
