#include "daemon/control_service.h"

#include <numeric>

#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/convert.h"

namespace strata::daemon {
namespace {

KvLayout TestLayout() {
  KvLayout layout;
  layout.model_id = "test-model";
  layout.num_layers = 2;
  layout.num_kv_heads = 2;
  layout.head_dim = 16;
  layout.dtype = KvDtype::kFloat16;
  layout.chunk_tokens = 16;
  return layout;
}

class ControlServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::HostTierOptions options;
    options.capacity_bytes = 64 * 4096;
    options.page_bytes = 4096;
    tier_ = *storage::HostTier::Create(options);
    service_ = std::make_unique<ControlService>(ControlServiceOptions{
        .host_tier = tier_.get(), .key_options = {}, .max_lookup_tokens = 1000});
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    stub_ = v1::StrataControl::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                           grpc::InsecureChannelCredentials()));
    hasher_.emplace(*KeyHasher::Create(TestLayout(), {}));
  }
  void TearDown() override {
    server_->Shutdown();
    server_.reset();
    service_.reset();
    tier_.reset();
  }

  void StoreChunk(const ChunkKey& key, uint32_t num_tokens) {
    absl::StatusOr<storage::ReserveResult> r =
        tier_->Reserve(TestLayout(), key, {.num_tokens = num_tokens});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(tier_->Commit(std::move(r->reservation)).ok());
  }

  grpc::Status Lookup(const v1::LookupRequest& request, v1::LookupResponse& response) {
    grpc::ClientContext context;
    return stub_->Lookup(&context, request, &response);
  }

  std::unique_ptr<storage::HostTier> tier_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::StrataControl::Stub> stub_;
  std::optional<KeyHasher> hasher_;
};

TEST_F(ControlServiceTest, LookupByTokensCountsTheCachedPrefix) {
  std::vector<uint32_t> tokens(40);  // two full chunks and a partial one of 8 tokens
  std::iota(tokens.begin(), tokens.end(), 100);
  const std::vector<ChunkKey> keys = hasher_->PrefixKeys(tokens, {}, PartialChunk::kInclude);
  StoreChunk(keys[0], 16);
  StoreChunk(keys[1], 16);

  v1::LookupRequest request;
  *request.mutable_layout() = ToProto(TestLayout());
  for (uint32_t t : tokens) request.add_tokens(t);
  request.set_with_keys(true);
  v1::LookupResponse response;
  ASSERT_TRUE(Lookup(request, response).ok());
  EXPECT_EQ(response.matched_tokens(), 32u);
  ASSERT_EQ(response.chunk_tiers_size(), 2);
  EXPECT_EQ(response.chunk_tiers(1), v1::TIER_HOST);
  EXPECT_EQ(response.matched_chunks(), 2u);
  EXPECT_EQ(response.total_chunks(), 3u);
  ASSERT_EQ(response.hits_size(), 2);
  EXPECT_EQ(response.hits(1).tier(), v1::TIER_HOST);
  EXPECT_EQ(*FromProto(response.hits(1).key()), keys[1]);

  StoreChunk(keys[2], 8);
  ASSERT_TRUE(Lookup(request, response = {}).ok());
  EXPECT_EQ(response.matched_tokens(), 40u);

  // A tenant salt gives a different chain: nothing cached for it.
  request.set_tenant_salt("other-tenant");
  ASSERT_TRUE(Lookup(request, response = {}).ok());
  EXPECT_EQ(response.matched_tokens(), 0u);
}

TEST_F(ControlServiceTest, LookupByKeys) {
  std::vector<uint32_t> tokens(32, 5);
  const std::vector<ChunkKey> keys = hasher_->PrefixKeys(tokens, {});
  StoreChunk(keys[0], 16);
  v1::LookupRequest request;
  for (const ChunkKey& key : keys) *request.add_keys() = ToProto(key);
  v1::LookupResponse response;
  ASSERT_TRUE(Lookup(request, response).ok());
  EXPECT_EQ(response.matched_chunks(), 1u);
  EXPECT_EQ(response.total_chunks(), 2u);
  EXPECT_EQ(response.chunk_tiers_size(), 1);
  EXPECT_EQ(response.hits_size(), 0) << "keys only when asked for";
}

TEST_F(ControlServiceTest, BadLookupsAreInvalidArgument) {
  v1::LookupResponse response;
  v1::LookupRequest neither;
  EXPECT_EQ(Lookup(neither, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::LookupRequest both;
  both.add_tokens(1);
  *both.add_keys() = ToProto(hasher_->PrefixKeys(std::vector<uint32_t>(16, 1), {})[0]);
  EXPECT_EQ(Lookup(both, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::LookupRequest no_layout;
  no_layout.add_tokens(1);
  EXPECT_EQ(Lookup(no_layout, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::LookupRequest bad_layout;
  *bad_layout.mutable_layout() = ToProto(TestLayout());
  bad_layout.mutable_layout()->set_dtype(static_cast<v1::KvDtype>(77));
  bad_layout.add_tokens(1);
  EXPECT_EQ(Lookup(bad_layout, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::LookupRequest too_many;
  *too_many.mutable_layout() = ToProto(TestLayout());
  for (int i = 0; i < 1001; ++i) too_many.add_tokens(i);
  EXPECT_EQ(Lookup(too_many, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::LookupRequest short_digest;
  v1::ChunkKey* key = short_digest.add_keys();
  *key = ToProto(hasher_->PrefixKeys(std::vector<uint32_t>(16, 1), {})[0]);
  key->set_digest("abc");
  EXPECT_EQ(Lookup(short_digest, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ControlServiceTest, HealthAndStats) {
  grpc::ClientContext health_context;
  v1::HealthResponse health;
  ASSERT_TRUE(stub_->Health(&health_context, v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.status(), v1::HealthResponse::SERVING_STATUS_SERVING);
  EXPECT_FALSE(health.version().empty());
  service_->SetDraining();
  grpc::ClientContext draining_context;
  ASSERT_TRUE(stub_->Health(&draining_context, v1::HealthRequest(), &health).ok());
  EXPECT_EQ(health.status(), v1::HealthResponse::SERVING_STATUS_DRAINING);

  StoreChunk(hasher_->PrefixKeys(std::vector<uint32_t>(16, 9), {})[0], 16);
  grpc::ClientContext stats_context;
  v1::StatsResponse stats;
  ASSERT_TRUE(stub_->Stats(&stats_context, v1::StatsRequest(), &stats).ok());
  ASSERT_EQ(stats.tiers_size(), 1);
  EXPECT_EQ(stats.tiers(0).tier(), v1::TIER_HOST);
  EXPECT_EQ(stats.tiers(0).chunks(), 1u);
  EXPECT_EQ(stats.tiers(0).payload_bytes(), TestLayout().chunk_bytes(16));
  EXPECT_EQ(stats.tiers(0).capacity_bytes(), 64u * 4096);
}

}  // namespace
}  // namespace strata::daemon
