// ControlClient is the `strata` CLI's connection to a daemon's control API: a gRPC channel to
// "host:port" or "unix:///path/to/control.sock", and one call per method with a deadline.
// ClusterClient is its connection to strata-controller's cluster API (--controller), the same
// way. Not thread-safe (the CLI is single-threaded).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "control/bearer_auth.h"
#include "grpcpp/channel.h"
#include "proto/convert.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::cli {

struct ConnectOptions {
  std::chrono::milliseconds timeout{5000};  // deadline of each unary call
  // Sent as "authorization: Bearer <token>" when not empty.
  std::string bearer_token;
  // PEM root certificate(s) that sign the daemon's: TLS when not empty.
  std::string tls_ca_pem;
};

// A channel to `address` with the options' TLS. kInvalidArgument for an empty address.
absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                           const ConnectOptions& options);

// One unary call of `stub` with the options' deadline and bearer token; the server's status
// (or kDeadlineExceeded / kUnavailable when it cannot be reached in time).
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> CallUnary(Stub& stub,
                                   grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                                const Request&, Response*),
                                   const Request& request, const ConnectOptions& options) {
  grpc::ClientContext context;
  control::AttachBearerToken(context, options.bearer_token);
  context.set_deadline(std::chrono::system_clock::now() + options.timeout);
  Response response;
  const grpc::Status status = (stub.*method)(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

// The cluster API of strata-controller. Given several controllers ("a:1,b:2"), each call goes
// to the one that answered last (the first at the start) and, when that one answers UNAVAILABLE
// (a standby, or down), to the next in turn: the leader answers.
class ClusterClient {
 public:
  // `addresses`: one or more, comma-separated; as OpenChannel each.
  static absl::StatusOr<ClusterClient> Connect(const std::string& addresses,
                                               const ConnectOptions& options);

  absl::StatusOr<v1::ClusterLookupResponse> Lookup(const v1::LookupRequest& request);
  absl::StatusOr<v1::RouteResponse> Route(const v1::RouteRequest& request);
  absl::StatusOr<v1::ListInstancesResponse> ListInstances();
  absl::StatusOr<v1::NodeCallResponse> Forward(const v1::NodeCall& call);
  absl::StatusOr<v1::ClusterStatsResponse> Stats();

 private:
  using Stub = v1::StrataCluster::Stub;

  ClusterClient(std::vector<std::unique_ptr<Stub>> stubs, ConnectOptions options)
      : stubs_(std::move(stubs)), options_(std::move(options)) {}

  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                             Response*),
                                const Request& request) {
    absl::StatusOr<Response> answer;
    for (size_t attempt = 0; attempt < stubs_.size(); ++attempt) {
      answer = CallUnary(*stubs_[current_], method, request, options_);
      if (answer.status().code() != absl::StatusCode::kUnavailable) break;
      current_ = (current_ + 1) % stubs_.size();
    }
    return answer;
  }

  std::vector<std::unique_ptr<Stub>> stubs_;
  size_t current_ = 0;
  ConnectOptions options_;
};

class ControlClient {
 public:
  // "host:port", "unix:/path" or "unix:///path". kInvalidArgument for an empty address.
  static absl::StatusOr<ControlClient> Connect(const std::string& address,
                                               const ConnectOptions& options);

  // Each call answers the daemon's status (or kDeadlineExceeded / kUnavailable when it cannot be
  // reached in time).
  absl::StatusOr<v1::HealthResponse> Health();
  absl::StatusOr<v1::StatsResponse> Stats();
  absl::StatusOr<v1::ListPeersResponse> ListPeers();
  absl::StatusOr<v1::LookupResponse> Lookup(const v1::LookupRequest& request);
  absl::StatusOr<v1::PinResponse> Pin(const v1::PinRequest& request);
  absl::StatusOr<v1::UnpinResponse> Unpin(const v1::UnpinRequest& request);
  absl::StatusOr<v1::MoveResponse> Move(const v1::MoveRequest& request);
  absl::StatusOr<v1::ClearResponse> Clear(const v1::ClearRequest& request);
  absl::StatusOr<v1::ListChunksResponse> ListChunks(const v1::ListChunksRequest& request);
  absl::StatusOr<v1::DrainResponse> Drain();
  // The node call's request, answered by the daemon into the result's response (its
  // instance_id is ignored; the result's code is 0). The daemon's error otherwise.
  absl::StatusOr<v1::NodeResult> Send(const v1::NodeCall& call);

  // Streams events from `from_sequence` (0: from the next one), with no deadline, calling
  // `on_event` for each until it returns false (then OK) or the stream fails (its status).
  absl::Status WatchEvents(uint64_t from_sequence,
                           absl::FunctionRef<bool(const v1::ChunkEvent&)> on_event);

 private:
  using Stub = v1::StrataControl::Stub;

  ControlClient(std::unique_ptr<Stub> stub, ConnectOptions options)
      : stub_(std::move(stub)), options_(std::move(options)) {}

  template <typename Request, typename Response>
  absl::StatusOr<Response> Call(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                                             Response*),
                                const Request& request) {
    return CallUnary(*stub_, method, request, options_);
  }

  std::unique_ptr<Stub> stub_;
  ConnectOptions options_;
};

}  // namespace strata::cli
