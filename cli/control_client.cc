#include "cli/control_client.h"

#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace strata::cli {

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address,
                                                           const ConnectOptions& options) {
  if (address.empty()) return absl::InvalidArgumentError("the address is empty");
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      options.tls_ca_pem.empty() ? grpc::InsecureChannelCredentials()
                                 : grpc::SslCredentials({.pem_root_certs = options.tls_ca_pem});
  return grpc::CreateChannel(address, credentials);
}

absl::StatusOr<ClusterClient> ClusterClient::Connect(const std::string& addresses,
                                                     const ConnectOptions& options) {
  std::vector<std::unique_ptr<v1::StrataCluster::Stub>> stubs;
  const std::vector<std::string> split = absl::StrSplit(addresses, ',');
  for (const std::string& address : split) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(address, options);
    if (!channel.ok()) return channel.status();
    stubs.push_back(v1::StrataCluster::NewStub(*channel));
  }
  return ClusterClient(std::move(stubs), options);
}

absl::StatusOr<v1::ClusterLookupResponse> ClusterClient::Lookup(const v1::LookupRequest& request) {
  return Call(&Stub::Lookup, request);
}

absl::StatusOr<v1::RouteResponse> ClusterClient::Route(const v1::RouteRequest& request) {
  return Call(&Stub::Route, request);
}

absl::StatusOr<v1::ListInstancesResponse> ClusterClient::ListInstances() {
  return Call(&Stub::ListInstances, v1::ListInstancesRequest());
}

absl::StatusOr<v1::NodeCallResponse> ClusterClient::Forward(const v1::NodeCall& call) {
  return Call(&Stub::Forward, call);
}

absl::StatusOr<v1::ClusterStatsResponse> ClusterClient::Stats() {
  return Call(&Stub::Stats, v1::ClusterStatsRequest());
}

absl::StatusOr<ControlClient> ControlClient::Connect(const std::string& address,
                                                     const ConnectOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = OpenChannel(address, options);
  if (!channel.ok()) return channel.status();
  return ControlClient(v1::StrataControl::NewStub(*channel), options);
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

absl::StatusOr<v1::NodeResult> ControlClient::Send(const v1::NodeCall& call) {
  v1::NodeResult result;
  // Each case: the call, then its response moved into the result.
  const auto answer = [&result](auto response, auto slot) -> absl::Status {
    if (!response.ok()) return response.status();
    *(result.*slot)() = *std::move(response);
    return absl::OkStatus();
  };
  absl::Status status;
  switch (call.request_case()) {
    case v1::NodeCall::kPin:
      status = answer(Pin(call.pin()), &v1::NodeResult::mutable_pin);
      break;
    case v1::NodeCall::kUnpin:
      status = answer(Unpin(call.unpin()), &v1::NodeResult::mutable_unpin);
      break;
    case v1::NodeCall::kClear:
      status = answer(Clear(call.clear()), &v1::NodeResult::mutable_clear);
      break;
    case v1::NodeCall::kMove:
      status = answer(Move(call.move()), &v1::NodeResult::mutable_move);
      break;
    case v1::NodeCall::kCompress:
      status = answer(Call(&Stub::Compress, call.compress()), &v1::NodeResult::mutable_compress);
      break;
    case v1::NodeCall::kDecompress:
      status =
          answer(Call(&Stub::Decompress, call.decompress()), &v1::NodeResult::mutable_decompress);
      break;
    case v1::NodeCall::kStats:
      status = answer(Stats(), &v1::NodeResult::mutable_stats);
      break;
    case v1::NodeCall::REQUEST_NOT_SET:
      status = absl::InvalidArgumentError("a node call needs a request");
      break;
  }
  if (!status.ok()) return status;
  return result;
}

absl::Status ControlClient::WatchEvents(uint64_t from_sequence,
                                        absl::FunctionRef<bool(const v1::ChunkEvent&)> on_event) {
  grpc::ClientContext context;
  control::AttachBearerToken(context, options_.bearer_token);
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
