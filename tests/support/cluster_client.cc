#include "tests/support/cluster_client.h"

#include <thread>
#include <utility>

#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "proto/convert.h"

namespace strata::test_support {

ClusterClient::ClusterClient(const std::string& address, std::string token)
    : stub_(v1::StrataCluster::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
      token_(std::move(token)) {}

void ClusterClient::Prepare(grpc::ClientContext& context) const {
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
}

std::string ErrorText(const grpc::Status& status) {
  return fmt::format("error {}: {}", static_cast<int>(status.error_code()), status.error_message());
}

std::string ClusterClient::HeldPrefixes(const std::vector<ChunkKey>& chain, bool* complete) {
  v1::LookupRequest request;
  for (const ChunkKey& key : chain) *request.add_keys() = ToProto(key);
  grpc::ClientContext context;
  Prepare(context);
  v1::ClusterLookupResponse response;
  const grpc::Status status = stub_->Lookup(&context, request, &response);
  if (complete != nullptr) *complete = status.ok() && response.complete();
  if (!status.ok()) return ErrorText(status);
  std::string held;
  for (const v1::InstancePrefix& prefix : response.instances()) {
    held += fmt::format("{}{}:{}", held.empty() ? "" : " ", prefix.instance_id(),
                        prefix.matched_chunks());
  }
  return held;
}

std::string ClusterClient::Leases() {
  v1::ListInstancesResponse response;
  if (const grpc::Status status = ListInstances(response); !status.ok()) return ErrorText(status);
  std::string leases;
  for (const v1::InstanceInfo& info : response.instances()) {
    leases +=
        fmt::format("{}{}={}", leases.empty() ? "" : " ", info.instance_id(), info.lease_id());
  }
  return leases;
}

std::string ClusterClient::Following() {
  v1::ListInstancesResponse response;
  if (const grpc::Status status = ListInstances(response); !status.ok()) return ErrorText(status);
  std::string ids;
  for (const v1::InstanceInfo& info : response.instances()) {
    if (info.following()) ids += (ids.empty() ? "" : " ") + info.instance_id();
  }
  return ids;
}

grpc::Status ClusterClient::ListInstances(v1::ListInstancesResponse& response) {
  grpc::ClientContext context;
  Prepare(context);
  return stub_->ListInstances(&context, v1::ListInstancesRequest(), &response);
}

grpc::Status ClusterClient::Forward(const v1::NodeCall& call, v1::NodeCallResponse& response) {
  grpc::ClientContext context;
  Prepare(context);
  return stub_->Forward(&context, call, &response);
}

grpc::Status ClusterClient::Stats(v1::ClusterStatsResponse& response) {
  grpc::ClientContext context;
  Prepare(context);
  return stub_->Stats(&context, v1::ClusterStatsRequest(), &response);
}

std::unique_ptr<grpc::ClientReader<v1::ClusterWatchResponse>> ClusterClient::Watch(
    grpc::ClientContext& context) {
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return stub_->WatchEvents(&context, v1::ClusterWatchRequest());
}

bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

}  // namespace strata::test_support
