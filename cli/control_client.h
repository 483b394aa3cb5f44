// ControlClient is the `strata` CLI's connection to a daemon's control API: a gRPC channel to
// "host:port" or "unix:///path/to/control.sock", and one call per method with a deadline.
// Not thread-safe (the CLI is single-threaded).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::cli {

class ControlClient {
 public:
  // "host:port", "unix:/path" or "unix:///path". kInvalidArgument for an empty address.
  static absl::StatusOr<ControlClient> Connect(const std::string& address,
                                               std::chrono::milliseconds timeout);

  absl::StatusOr<v1::HealthResponse> Health();
  absl::StatusOr<v1::StatsResponse> Stats();
  absl::StatusOr<v1::LookupResponse> Lookup(const v1::LookupRequest& request);

 private:
  ControlClient(std::unique_ptr<v1::StrataControl::Stub> stub, std::chrono::milliseconds timeout)
      : stub_(std::move(stub)), timeout_(timeout) {}

  std::unique_ptr<grpc::ClientContext> NewContext() const;

  std::unique_ptr<v1::StrataControl::Stub> stub_;
  std::chrono::milliseconds timeout_;
};

}  // namespace strata::cli
