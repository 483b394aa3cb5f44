#include "controller/service/cluster_service.h"

#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/key_hasher.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/test_layout.h"

namespace strata::controller {
namespace {

using ::testing::HasSubstr;

// Llama-3.1-8B's KV geometry (128 KiB a token) in 256-token chunks: a host-tier chunk loads
// faster than it is recomputed, a disk chunk (1.4 GB/s by default) slower.
KvLayout RouteLayout() {
  return test_support::SmallLayout({.model_id = "route-model",
                                    .num_layers = 32,
                                    .num_kv_heads = 8,
                                    .head_dim = 128,
                                    .chunk_tokens = 256});
}

constexpr uint32_t kPromptTokens = 16 * 256;

class ClusterServiceTest : public ::testing::Test {
 protected:
  // The token the service requires over TCP; every call but the refused ones carries it.
  virtual std::string_view BearerToken() const { return ""; }

  void SetUp() override {
    index_ = *ClusterIndex::Create({.max_instances = 16, .shard_count = 4});
    prompt_.resize(kPromptTokens);
    std::iota(prompt_.begin(), prompt_.end(), 5000);
    keys_ = KeyHasher::Create(RouteLayout(), {})->PrefixKeys(prompt_, {});
    registry_ =
        *InstanceRegistry::Create({.start_feed = [this](const v1::RegisterInstanceRequest& r) {
          // A daemon that is never reached: the feed registers its instance and keeps trying.
          return DaemonFeed::Start({.instance_id = r.instance_id(),
                                    .channel = grpc::CreateChannel(
                                        r.control_endpoint(), grpc::InsecureChannelCredentials()),
                                    .index = index_.get()});
        }});
    service_ = std::make_unique<ClusterService>(
        ClusterServiceOptions{.index = index_.get(),
                              .registry = registry_.get(),
                              .bearer_token = std::string(BearerToken()),
                              .limits = {.max_tokens = 8192},
                              .max_candidates = 4});
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = v1::StrataCluster::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                           grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  // `instance` holds keys_[first, end) in `tier`.
  void Hold(const std::string& instance, size_t first, size_t end, Tier tier) {
    (void)index_->RegisterInstance(instance);  // FAILED_PRECONDITION when it is registered
    std::vector<ChunkEvent> events;
    for (size_t i = first; i < end; ++i) events.push_back({.tier = tier, .key = keys_[i]});
    ASSERT_TRUE(index_->Ingest(instance, events).ok());
  }

  v1::LookupRequest ByTokens() const {
    v1::LookupRequest request;
    *request.mutable_layout() = ToProto(RouteLayout());
    request.mutable_tokens_fixed32()->Assign(prompt_.begin(), prompt_.end());
    return request;
  }

  grpc::Status Lookup(const v1::LookupRequest& request, v1::ClusterLookupResponse& response) {
    grpc::ClientContext context;
    return stub_->Lookup(&context, request, &response);
  }
  grpc::Status Route(const v1::RouteRequest& request, v1::RouteResponse& response) {
    grpc::ClientContext context;
    return stub_->Route(&context, request, &response);
  }

  std::unique_ptr<ClusterIndex> index_;
  std::vector<uint32_t> prompt_;
  std::vector<ChunkKey> keys_;
  std::unique_ptr<InstanceRegistry> registry_;
  std::unique_ptr<ClusterService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::StrataCluster::Stub> stub_;
};

TEST_F(ClusterServiceTest, LookupGivesEachInstancesPrefixAndItsTiers) {
  Hold("a", 0, 16, Tier::kHost);
  Hold("b", 0, 4, Tier::kHost);
  Hold("b", 4, 8, Tier::kDisk);
  Hold("c", 1, 16, Tier::kHost);  // lacks the first chunk: no prefix at all

  v1::ClusterLookupResponse response;
  ASSERT_TRUE(Lookup(ByTokens(), response).ok());
  EXPECT_EQ(response.total_chunks(), 16u);
  ASSERT_EQ(response.instances_size(), 2);
  const v1::InstancePrefix& a = response.instances(0);
  EXPECT_EQ(a.instance_id(), "a");
  EXPECT_EQ(a.matched_chunks(), 16u);
  EXPECT_EQ(a.matched_tokens(), kPromptTokens);
  ASSERT_EQ(a.tiers_size(), 1);
  EXPECT_EQ(a.tiers(0).tier(), v1::TIER_HOST);
  const v1::InstancePrefix& b = response.instances(1);
  EXPECT_EQ(b.instance_id(), "b");
  EXPECT_EQ(b.matched_chunks(), 8u);
  EXPECT_EQ(b.matched_tokens(), 8u * 256);
  ASSERT_EQ(b.tiers_size(), 2);
  EXPECT_EQ(b.tiers(0).tier(), v1::TIER_HOST);
  EXPECT_EQ(b.tiers(0).chunks(), 4u);
  EXPECT_EQ(b.tiers(1).tier(), v1::TIER_DISK);
  EXPECT_EQ(b.tiers(1).chunks(), 4u);

  // The same by keys (no tokens to count) and by varint tokens.
  v1::LookupRequest by_keys;
  for (const ChunkKey& key : keys_) *by_keys.add_keys() = ToProto(key);
  ASSERT_TRUE(Lookup(by_keys, response = {}).ok());
  ASSERT_EQ(response.instances_size(), 2);
  EXPECT_EQ(response.instances(1).matched_chunks(), 8u);
  EXPECT_EQ(response.instances(1).matched_tokens(), 0u);
  v1::LookupRequest varint = ByTokens();
  varint.clear_tokens_fixed32();
  varint.mutable_tokens()->Assign(prompt_.begin(), prompt_.end());
  ASSERT_TRUE(Lookup(varint, response = {}).ok());
  EXPECT_EQ(response.instances(0).matched_tokens(), kPromptTokens);

  // Another tenant's salt is another chain: nobody holds it.
  v1::LookupRequest salted = ByTokens();
  salted.set_tenant_salt("other");
  ASSERT_TRUE(Lookup(salted, response = {}).ok());
  EXPECT_EQ(response.instances_size(), 0);
  EXPECT_EQ(response.total_chunks(), 16u);
}

TEST_F(ClusterServiceTest, BadLookupsAreInvalidArgumentAndTheServiceGoesOn) {
  v1::ClusterLookupResponse response;
  EXPECT_EQ(Lookup(v1::LookupRequest(), response).error_code(), grpc::INVALID_ARGUMENT);
  v1::LookupRequest no_layout = ByTokens();
  no_layout.clear_layout();
  EXPECT_EQ(Lookup(no_layout, response).error_code(), grpc::INVALID_ARGUMENT);
  v1::LookupRequest both = ByTokens();
  both.add_tokens(1);
  EXPECT_EQ(Lookup(both, response).error_code(), grpc::INVALID_ARGUMENT);
  v1::LookupRequest too_long = ByTokens();
  too_long.mutable_tokens_fixed32()->Resize(8193, 1);
  EXPECT_EQ(Lookup(too_long, response).error_code(), grpc::INVALID_ARGUMENT);
  v1::LookupRequest bad_key;
  *bad_key.add_keys() = ToProto(keys_[0]);
  bad_key.mutable_keys(0)->set_digest("short");
  EXPECT_EQ(Lookup(bad_key, response).error_code(), grpc::INVALID_ARGUMENT);

  Hold("a", 0, 2, Tier::kHost);
  ASSERT_TRUE(Lookup(ByTokens(), response).ok());
  EXPECT_EQ(response.instances(0).matched_chunks(), 2u);
}

v1::RouteCandidate Candidate(const std::string& id, uint64_t queued = 0) {
  v1::RouteCandidate candidate;
  candidate.set_instance_id(id);
  candidate.set_queued_prefill_tokens(queued);
  return candidate;
}

TEST_F(ClusterServiceTest, RouteRanksByModelledTtftWithTheScoresParts) {
  Hold("host", 0, 16, Tier::kHost);
  Hold("disk", 0, 16, Tier::kDisk);
  Hold("busy", 0, 16, Tier::kHost);
  v1::RouteRequest request;
  *request.mutable_prompt() = ByTokens();
  *request.add_candidates() = Candidate("busy", /*queued=*/100'000);
  *request.add_candidates() = Candidate("disk");
  *request.add_candidates() = Candidate("cold");  // unknown to the index: holds nothing
  *request.add_candidates() = Candidate("host");
  v1::RouteResponse response;
  ASSERT_TRUE(Route(request, response).ok());
  EXPECT_EQ(response.prompt_tokens(), kPromptTokens);
  ASSERT_EQ(response.ranked_size(), 4);
  for (const v1::RouteScore& score : response.ranked()) {
    EXPECT_NEAR(score.modelled_ttft_s(), score.queue_s() + score.load_s() + score.prefill_s(), 1e-9)
        << score.instance_id();
  }
  const v1::RouteScore& first = response.ranked(0);
  EXPECT_EQ(first.instance_id(), "host");
  EXPECT_EQ(first.cached_tokens(), kPromptTokens);
  EXPECT_EQ(first.loaded_tokens(), kPromptTokens);
  EXPECT_EQ(first.prefill_s(), 0);
  EXPECT_GT(first.load_s(), 0);
  EXPECT_EQ(response.ranked(3).instance_id(), "busy") << "100K queued tokens cost more";
  EXPECT_GT(response.ranked(3).queue_s(), 1.0);
  // The disk copy is slower to load than to recompute at 1.4 GB/s: it counts as recomputed,
  // so "disk" and "cold" model the same TTFT.
  for (int i : {1, 2}) {
    const v1::RouteScore& score = response.ranked(i);
    EXPECT_THAT(score.instance_id(), ::testing::AnyOf("disk", "cold"));
    EXPECT_EQ(score.loaded_tokens(), 0u);
    EXPECT_EQ(score.cached_tokens(), score.instance_id() == "disk" ? kPromptTokens : 0u);
  }
  EXPECT_NEAR(response.ranked(1).modelled_ttft_s(), response.ranked(2).modelled_ttft_s(), 1e-9);
}

TEST_F(ClusterServiceTest, BadRoutesAreInvalidArgument) {
  v1::RouteResponse response;
  auto route = [&](const std::function<void(v1::RouteRequest&)>& spoil) {
    v1::RouteRequest request;
    *request.mutable_prompt() = ByTokens();
    *request.add_candidates() = Candidate("a");
    spoil(request);
    return Route(request, response);
  };
  EXPECT_TRUE(route([](v1::RouteRequest&) {}).ok());
  const grpc::Status none = route([](v1::RouteRequest& r) { r.clear_candidates(); });
  EXPECT_EQ(none.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(none.error_message(), HasSubstr("candidate"));
  EXPECT_EQ(route([](v1::RouteRequest& r) { *r.add_candidates() = Candidate("a"); }).error_code(),
            grpc::INVALID_ARGUMENT);
  EXPECT_EQ(route([](v1::RouteRequest& r) { *r.add_candidates() = Candidate(""); }).error_code(),
            grpc::INVALID_ARGUMENT);
  EXPECT_EQ(route([](v1::RouteRequest& r) {
              for (const char* id : {"b", "c", "d", "e"}) *r.add_candidates() = Candidate(id);
            }).error_code(),
            grpc::INVALID_ARGUMENT)
      << "5 candidates, the limit is 4";
  const grpc::Status by_keys = route([&](v1::RouteRequest& r) {
    r.mutable_prompt()->clear_tokens_fixed32();
    *r.mutable_prompt()->add_keys() = ToProto(keys_[0]);
  });
  EXPECT_EQ(by_keys.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(by_keys.error_message(), HasSubstr("tokens"));
  const grpc::Status both = route([](v1::RouteRequest& r) { r.mutable_prompt()->add_tokens(1); });
  EXPECT_EQ(both.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_THAT(both.error_message(), HasSubstr("not in both"));
  EXPECT_EQ(route([](v1::RouteRequest& r) { r.mutable_prompt()->clear_layout(); }).error_code(),
            grpc::INVALID_ARGUMENT);
  EXPECT_EQ(route([&](v1::RouteRequest& r) {
              *r.mutable_prompt()->add_keys() = ToProto(keys_[0]);
            }).error_code(),
            grpc::INVALID_ARGUMENT)
      << "tokens and keys";
  EXPECT_TRUE(route([](v1::RouteRequest&) {}).ok()) << "still serving";
}

TEST_F(ClusterServiceTest, MembershipCallsAndTheirBadInput) {
  v1::RegisterInstanceRequest registration;
  registration.set_instance_id("node-a");
  registration.set_control_endpoint("127.0.0.1:1");
  v1::RegisterInstanceResponse registered;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->RegisterInstance(&context, registration, &registered).ok());
  }
  EXPECT_GT(registered.heartbeat_interval_ms(), 0u);
  const auto call = [&](auto method, const auto& request, auto& response) {
    grpc::ClientContext context;
    return (stub_.get()->*method)(&context, request, &response).error_code();
  };
  v1::HeartbeatRequest beat;
  beat.set_instance_id("node-a");
  beat.set_lease_id(registered.lease_id());
  v1::HeartbeatResponse beaten;
  EXPECT_EQ(call(&v1::StrataCluster::Stub::Heartbeat, beat, beaten), grpc::OK);
  beat.set_lease_id(registered.lease_id() + 1);
  EXPECT_EQ(call(&v1::StrataCluster::Stub::Heartbeat, beat, beaten), grpc::NOT_FOUND);
  beat.set_instance_id("");
  EXPECT_EQ(call(&v1::StrataCluster::Stub::Heartbeat, beat, beaten), grpc::NOT_FOUND);

  v1::QueryInstanceRequest query;
  query.set_instance_id("node-a");
  v1::InstanceInfo info;
  EXPECT_EQ(call(&v1::StrataCluster::Stub::QueryInstance, query, info), grpc::OK);
  EXPECT_EQ(info.lease_id(), registered.lease_id());
  query.set_instance_id("node-z");
  EXPECT_EQ(call(&v1::StrataCluster::Stub::QueryInstance, query, info), grpc::NOT_FOUND);

  for (const char* endpoint : {"", "nowhere", "host:0", "host:http"}) {
    v1::RegisterInstanceRequest bad = registration;
    bad.set_instance_id("node-b");
    bad.set_control_endpoint(endpoint);
    EXPECT_EQ(call(&v1::StrataCluster::Stub::RegisterInstance, bad, registered),
              grpc::INVALID_ARGUMENT)
        << endpoint;
  }
  v1::RegisterInstanceRequest nameless = registration;
  nameless.clear_instance_id();
  EXPECT_EQ(call(&v1::StrataCluster::Stub::RegisterInstance, nameless, registered),
            grpc::INVALID_ARGUMENT);

  v1::ListInstancesResponse listed;
  EXPECT_EQ(call(&v1::StrataCluster::Stub::ListInstances, v1::ListInstancesRequest(), listed),
            grpc::OK);
  ASSERT_EQ(listed.instances_size(), 1);
  EXPECT_EQ(listed.instances(0).instance_id(), "node-a");

  v1::DeregisterInstanceRequest leave;
  leave.set_instance_id("node-a");
  leave.set_lease_id(info.lease_id() + 1);
  v1::DeregisterInstanceResponse left;
  EXPECT_EQ(call(&v1::StrataCluster::Stub::DeregisterInstance, leave, left), grpc::NOT_FOUND);
  leave.set_lease_id(info.lease_id());
  EXPECT_EQ(call(&v1::StrataCluster::Stub::DeregisterInstance, leave, left), grpc::OK);
  EXPECT_EQ(index_->stats().instances, 0u);
}

class ClusterServiceAuthTest : public ClusterServiceTest {
 protected:
  std::string_view BearerToken() const override { return "s3cret"; }
};

TEST_F(ClusterServiceAuthTest, EveryCallNeedsTheToken) {
  const auto code = [&](const char* token, auto method, const auto& request, auto response) {
    grpc::ClientContext context;
    if (token != nullptr) context.AddMetadata("authorization", std::string("Bearer ") + token);
    return (stub_.get()->*method)(&context, request, &response).error_code();
  };
  v1::RegisterInstanceRequest registration;
  registration.set_instance_id("node-a");
  registration.set_control_endpoint("127.0.0.1:1");
  for (const char* token : {static_cast<const char*>(nullptr), "wrong", "s3cre", "s3cret "}) {
    EXPECT_EQ(code(token, &v1::StrataCluster::Stub::RegisterInstance, registration,
                   v1::RegisterInstanceResponse()),
              grpc::UNAUTHENTICATED);
    EXPECT_EQ(
        code(token, &v1::StrataCluster::Stub::Lookup, ByTokens(), v1::ClusterLookupResponse()),
        grpc::UNAUTHENTICATED);
    EXPECT_EQ(code(token, &v1::StrataCluster::Stub::ListInstances, v1::ListInstancesRequest(),
                   v1::ListInstancesResponse()),
              grpc::UNAUTHENTICATED);
    EXPECT_EQ(code(token, &v1::StrataCluster::Stub::Heartbeat, v1::HeartbeatRequest(),
                   v1::HeartbeatResponse()),
              grpc::UNAUTHENTICATED);
  }
  EXPECT_EQ(registry_->size(), 0u);
  EXPECT_EQ(code("s3cret", &v1::StrataCluster::Stub::RegisterInstance, registration,
                 v1::RegisterInstanceResponse()),
            grpc::OK);
  EXPECT_EQ(
      code("s3cret", &v1::StrataCluster::Stub::Lookup, ByTokens(), v1::ClusterLookupResponse()),
      grpc::OK);
}

}  // namespace
}  // namespace strata::controller
