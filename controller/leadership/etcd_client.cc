#include "controller/leadership/etcd_client.h"

#include <utility>

#include "control/redialing_channel.h"
#include "fmt/format.h"
#include "grpcpp/security/credentials.h"

namespace strata::controller {

EtcdClient::EtcdClient(std::vector<std::string> endpoints, std::chrono::milliseconds call_timeout)
    : call_timeout_(call_timeout) {
  for (std::string& address : endpoints) {
    std::shared_ptr<grpc::Channel> channel =
        control::CreateRedialingChannel(address, grpc::InsecureChannelCredentials());
    endpoints_.push_back({.address = std::move(address),
                          .kv = etcdserverpb::KV::NewStub(channel),
                          .lease = etcdserverpb::Lease::NewStub(channel)});
  }
}

absl::Status EtcdClient::Failed(std::string_view what, const grpc::Status& status) {
  size_t current = current_.load();
  absl::Status failure = absl::UnavailableError(
      fmt::format("etcd {} at {}: {}", what, endpoints_[current].address, status.error_message()));
  // Only the first of several users that saw the same endpoint fail moves on.
  current_.compare_exchange_strong(current, (current + 1) % endpoints_.size());
  return failure;
}

void EtcdClient::SetDeadline(grpc::ClientContext& context) const {
  context.set_deadline(std::chrono::system_clock::now() + call_timeout_);
}

std::string PrefixRangeEnd(std::string prefix) {
  while (!prefix.empty()) {
    if (static_cast<unsigned char>(prefix.back()) < 0xff) {
      prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

}  // namespace strata::controller
