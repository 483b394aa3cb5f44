// What integration tests ask a strata-controller (its StrataCluster API over TCP), as strings
// that assertions compare whole, and Eventually, their bounded poll. Each call carries the bearer
// token given (none when empty) and a 5 s deadline. Thread-compatible.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/chunk_key.h"
#include "grpcpp/support/status.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::test_support {

class ClusterClient {
 public:
  explicit ClusterClient(const std::string& address, std::string token = "");

  // Every instance's held prefix of `chain`, "id:chunks" joined by spaces, longest first; or
  // "error CODE: message". `complete`, when given, gets the answer's complete flag (false on an
  // error).
  std::string HeldPrefixes(const std::vector<ChunkKey>& chain, bool* complete = nullptr);
  // The registered instances, "id=lease_id ..."; or "error CODE: message".
  std::string Leases();
  // The registered instances that follow their daemon, "id id ..."; or "error CODE: message".
  std::string Following();

  grpc::Status ListInstances(v1::ListInstancesResponse& response);
  grpc::Status Forward(const v1::NodeCall& call, v1::NodeCallResponse& response);
  grpc::Status Stats(v1::ClusterStatsResponse& response);
  // Opens the cluster's WatchEvents stream on `context` (given a 30 s deadline).
  std::unique_ptr<grpc::ClientReader<v1::ClusterWatchResponse>> Watch(grpc::ClientContext& context);

 private:
  void Prepare(grpc::ClientContext& context) const;

  std::unique_ptr<v1::StrataCluster::Stub> stub_;
  std::string token_;
};

// "error CODE: message" of a failed call.
std::string ErrorText(const grpc::Status& status);

// Polls `condition` every 20 ms for up to `timeout`; whether it held.
bool Eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds timeout = std::chrono::seconds(15));

}  // namespace strata::test_support
