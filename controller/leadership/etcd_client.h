// EtcdClient: the channels to a cluster's etcd endpoints that the controller's election and its
// member records share, and which endpoint calls go to now. A call that fails moves every user on
// to the next endpoint (Failed), so one dead etcd member costs one failed call, not one per user.
//
// Threading: thread-safe; the stubs are gRPC's (thread-safe). Ownership: owns the channels.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "etcd/etcd_v3_subset.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace strata::controller {

class EtcdClient {
 public:
  // `endpoints` must not be empty ("host:port", plaintext).
  explicit EtcdClient(std::vector<std::string> endpoints,
                      std::chrono::milliseconds call_timeout = std::chrono::milliseconds(1'000));

  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // The stubs of the endpoint calls go to now.
  etcdserverpb::KV::Stub& kv() const { return *endpoints_[current_.load()].kv; }
  etcdserverpb::Lease::Stub& lease() const { return *endpoints_[current_.load()].lease; }
  // A call there failed: later calls go to the next endpoint. Returns kUnavailable "etcd <what>
  // at <endpoint>: <gRPC's message>".
  absl::Status Failed(std::string_view what, const grpc::Status& status);
  // Gives a unary call the client's deadline.
  void SetDeadline(grpc::ClientContext& context) const;

 private:
  struct Endpoint {
    std::string address;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };
  std::vector<Endpoint> endpoints_;
  const std::chrono::milliseconds call_timeout_;
  std::atomic<size_t> current_{0};
};

// The end of etcd's range of every key that starts with `prefix` (the prefix with its last byte
// incremented, as etcd's clients compute it).
std::string PrefixRangeEnd(std::string prefix);

}  // namespace strata::controller
