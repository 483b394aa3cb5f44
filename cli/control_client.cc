#include "cli/control_client.h"

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/convert.h"

namespace strata::cli {

absl::StatusOr<ControlClient> ControlClient::Connect(const std::string& address,
                                                     std::chrono::milliseconds timeout) {
  if (address.empty()) return absl::InvalidArgumentError("--addr is empty");
  return ControlClient(
      v1::StrataControl::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
      timeout);
}

std::unique_ptr<grpc::ClientContext> ControlClient::NewContext() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout_);
  return context;
}

absl::StatusOr<v1::HealthResponse> ControlClient::Health() {
  v1::HealthResponse response;
  grpc::Status status = stub_->Health(NewContext().get(), v1::HealthRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::StatsResponse> ControlClient::Stats() {
  v1::StatsResponse response;
  grpc::Status status = stub_->Stats(NewContext().get(), v1::StatsRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::LookupResponse> ControlClient::Lookup(const v1::LookupRequest& request) {
  v1::LookupResponse response;
  grpc::Status status = stub_->Lookup(NewContext().get(), request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

}  // namespace strata::cli
