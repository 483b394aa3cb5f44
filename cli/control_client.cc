#include "cli/control_client.h"

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/convert.h"

namespace strata::cli {

absl::StatusOr<ControlClient> ControlClient::Connect(const std::string& address,
                                                     const ConnectOptions& options) {
  if (address.empty()) return absl::InvalidArgumentError("--addr is empty");
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.tls_ca_pem.empty() ? grpc::InsecureChannelCredentials()
                                 : grpc::SslCredentials({.pem_root_certs = options.tls_ca_pem});
  return ControlClient(v1::StrataControl::NewStub(grpc::CreateChannel(address, credentials)),
                       options);
}

void ControlClient::Prepare(grpc::ClientContext& context) const {
  if (!options_.bearer_token.empty()) {
    context.AddMetadata("authorization", "Bearer " + options_.bearer_token);
  }
}

template <typename Request, typename Response>
absl::StatusOr<Response> ControlClient::Call(grpc::Status (Stub::*method)(grpc::ClientContext*,
                                                                          const Request&,
                                                                          Response*),
                                             const Request& request) {
  grpc::ClientContext context;
  Prepare(context);
  context.set_deadline(std::chrono::system_clock::now() + options_.timeout);
  Response response;
  grpc::Status status = (stub_.get()->*method)(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::HealthResponse> ControlClient::Health() {
  return Call(&Stub::Health, v1::HealthRequest());
}

absl::StatusOr<v1::StatsResponse> ControlClient::Stats() {
  return Call(&Stub::Stats, v1::StatsRequest());
}

absl::StatusOr<v1::ListPeersResponse> ControlClient::ListPeers() {
  return Call(&Stub::ListPeers, v1::ListPeersRequest());
}

absl::StatusOr<v1::LookupResponse> ControlClient::Lookup(const v1::LookupRequest& request) {
  return Call(&Stub::Lookup, request);
}

absl::StatusOr<v1::PinResponse> ControlClient::Pin(const v1::PinRequest& request) {
  return Call(&Stub::Pin, request);
}

absl::StatusOr<v1::UnpinResponse> ControlClient::Unpin(const v1::UnpinRequest& request) {
  return Call(&Stub::Unpin, request);
}

absl::StatusOr<v1::MoveResponse> ControlClient::Move(const v1::MoveRequest& request) {
  return Call(&Stub::Move, request);
}

absl::StatusOr<v1::ClearResponse> ControlClient::Clear(const v1::ClearRequest& request) {
  return Call(&Stub::Clear, request);
}

absl::StatusOr<v1::ListChunksResponse> ControlClient::ListChunks(
    const v1::ListChunksRequest& request) {
  return Call(&Stub::ListChunks, request);
}

absl::StatusOr<v1::DrainResponse> ControlClient::Drain() {
  return Call(&Stub::Drain, v1::DrainRequest());
}

absl::Status ControlClient::WatchEvents(uint64_t from_sequence,
                                        absl::FunctionRef<bool(const v1::ChunkEvent&)> on_event) {
  grpc::ClientContext context;
  Prepare(context);
  v1::WatchEventsRequest request;
  request.set_from_sequence(from_sequence);
  std::unique_ptr<grpc::ClientReader<v1::WatchEventsResponse>> reader =
      stub_->WatchEvents(&context, request);
  v1::WatchEventsResponse response;
  bool stopped = false;
  while (!stopped && reader->Read(&response)) {
    for (const v1::ChunkEvent& event : response.events()) {
      if (!on_event(event)) {
        stopped = true;
        break;
      }
    }
  }
  if (stopped) {
    context.TryCancel();
    while (reader->Read(&response)) {
    }
    reader->Finish().IgnoreError();
    return absl::OkStatus();
  }
  return FromGrpcStatus(reader->Finish());
}

}  // namespace strata::cli
