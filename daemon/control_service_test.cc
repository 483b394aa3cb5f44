#include "daemon/control_service.h"

#include <algorithm>
#include <cstdio>
#include <future>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string_view>

#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "storage/io/testing/io_test_util.h"
#include "storage/tiered/tiered_store.h"
#include "tests/support/test_layout.h"

namespace strata::daemon {
namespace {

KvLayout TestLayout() { return test_support::SmallLayout(); }

class ControlServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::HostTierOptions options;
    options.capacity_bytes = 64 * 4096;
    options.page_bytes = 4096;
    options.hard_pin_quota_bytes = 2 * 4096;
    options.clock = &clock_;
    options.observer = events_.observer(storage::Tier::kHost);
    std::optional<storage::TieredDiskOptions> disk = DiskOptions();
    if (disk.has_value()) disk->observer = events_.observer(storage::Tier::kDisk);
    store_ = *storage::TieredStore::Create({.host = options, .disk = disk});
    tier_ = &store_->host();
    service_ =
        std::make_unique<ControlService>(ControlServiceOptions{.store = store_.get(),
                                                               .events = &events_,
                                                               .key_options = {},
                                                               .limits = {.max_tokens = 1000},
                                                               .lookups = &lookups_});
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::StrataControl::NewStub(channel_);
    hasher_.emplace(*KeyHasher::Create(TestLayout(), {}));
  }
  void TearDown() override {
    // Bounded: a test that fails mid-stream must not hang here.
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
    service_.reset();
    store_.reset();
  }

  // The disk tier under the service's host tier: none here.
  virtual std::optional<storage::TieredDiskOptions> DiskOptions() { return std::nullopt; }

  void StoreChunk(const ChunkKey& key, uint32_t num_tokens,
                  std::optional<std::string_view> tenant = std::nullopt) {
    absl::StatusOr<storage::ReserveResult> r =
        tier_->Reserve(TestLayout(), key, {.num_tokens = num_tokens, .tenant_name = tenant});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(tier_->Commit(std::move(r->reservation)).ok());
  }

  grpc::Status Lookup(const v1::LookupRequest& request, v1::LookupResponse& response) {
    grpc::ClientContext context;
    return stub_->Lookup(&context, request, &response);
  }

  // Stores the chain of `tokens` (partial last chunk included) and returns its keys.
  // With a tenant: salted with it and stored under its name, as an engine of the tenant does.
  std::vector<ChunkKey> StoreChain(const std::vector<uint32_t>& tokens,
                                   std::optional<std::string_view> tenant = std::nullopt) {
    std::vector<ChunkKey> keys =
        hasher_->PrefixKeys(tokens, {.tenant_salt = tenant.value_or("")}, PartialChunk::kInclude);
    for (size_t i = 0; i < keys.size(); ++i) {
      StoreChunk(keys[i], static_cast<uint32_t>(std::min<size_t>(16, tokens.size() - i * 16)),
                 tenant);
    }
    return keys;
  }

  // Every key ListChunks gives for `request`, page after page.
  std::vector<ChunkKey> ListAll(v1::ListChunksRequest request) {
    std::vector<ChunkKey> keys;
    do {
      v1::ListChunksResponse page;
      const grpc::Status status = Call(&v1::StrataControl::Stub::ListChunks, request, page);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok()) break;
      for (const v1::ChunkEntry& entry : page.chunks()) keys.push_back(*FromProto(entry.key()));
      request.set_page_token(page.next_page_token());
    } while (!request.page_token().empty());
    return keys;
  }

  v1::ChunkSelector TokenSelector(const std::vector<uint32_t>& tokens) {
    v1::ChunkSelector selector;
    *selector.mutable_layout() = ToProto(TestLayout());
    for (uint32_t t : tokens) selector.add_tokens(t);
    return selector;
  }

  static v1::ChunkSelector KeySelector(std::span<const ChunkKey> keys) {
    v1::ChunkSelector selector;
    for (const ChunkKey& key : keys) *selector.add_keys() = ToProto(key);
    return selector;
  }

  // Calls one unary RPC of the stub.
  template <typename Request, typename Response, typename Method>
  grpc::Status Call(Method method, const Request& request, Response& response) {
    grpc::ClientContext context;
    response.Clear();
    return (stub_.get()->*method)(&context, request, &response);
  }

  ManualClock clock_;
  EventLog events_{16};  // a small ring, so tests can outrun it
  LookupAccounting lookups_;
  std::unique_ptr<storage::TieredStore> store_;
  storage::HostTier* tier_ = nullptr;  // the store's
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
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

// tokens_fixed32 names the same chain as tokens; so do both spread over several fields, as a
// client's encoder may send a repeated field in pieces.
TEST_F(ControlServiceTest, LookupByFixed32TokensMatchesTokens) {
  std::vector<uint32_t> tokens(40);
  std::iota(tokens.begin(), tokens.end(), 300'000);  // three-byte varints
  const std::vector<ChunkKey> keys = hasher_->PrefixKeys(tokens, {}, PartialChunk::kInclude);
  StoreChunk(keys[0], 16);
  StoreChunk(keys[1], 16);

  v1::LookupRequest varint;
  *varint.mutable_layout() = ToProto(TestLayout());
  varint.mutable_tokens()->Assign(tokens.begin(), tokens.end());
  v1::LookupRequest fixed;
  *fixed.mutable_layout() = ToProto(TestLayout());
  fixed.mutable_tokens_fixed32()->Assign(tokens.begin(), tokens.end());
  v1::LookupResponse by_varint, by_fixed;
  ASSERT_TRUE(Lookup(varint, by_varint).ok());
  ASSERT_TRUE(Lookup(fixed, by_fixed).ok());
  EXPECT_EQ(by_varint.matched_tokens(), 32u);
  EXPECT_EQ(by_fixed.matched_tokens(), 32u);
  EXPECT_EQ(by_fixed.total_chunks(), 3u);

  // The same prompt in two pieces of tokens_fixed32: the wire bytes of two messages appended.
  v1::LookupRequest head, tail;
  *head.mutable_layout() = ToProto(TestLayout());
  head.mutable_tokens_fixed32()->Assign(tokens.begin(), tokens.begin() + 20);
  tail.mutable_tokens_fixed32()->Assign(tokens.begin() + 20, tokens.end());
  v1::LookupRequest pieces;
  ASSERT_TRUE(pieces.ParseFromString(head.SerializeAsString() + tail.SerializeAsString()));
  v1::LookupResponse by_pieces;
  ASSERT_TRUE(Lookup(pieces, by_pieces).ok());
  EXPECT_EQ(by_pieces.matched_tokens(), 32u);
  EXPECT_EQ(by_pieces.total_chunks(), 3u);

  // A prompt whose chain differs in its second chunk matches one chunk only.
  fixed.set_tokens_fixed32(20, 7);
  ASSERT_TRUE(Lookup(fixed, by_fixed = {}).ok());
  EXPECT_EQ(by_fixed.matched_tokens(), 16u);
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

  // Fields this daemon does not know (a newer client's) are skipped, in a key and around it;
  // the fields besides keys still count.
  request.mutable_keys(0)
      ->GetReflection()
      ->MutableUnknownFields(request.mutable_keys(0))
      ->AddVarint(15, 7);
  request.GetReflection()->MutableUnknownFields(&request)->AddLengthDelimited(99, "later");
  request.set_with_keys(true);
  ASSERT_TRUE(Lookup(request, response).ok());
  EXPECT_EQ(response.matched_chunks(), 1u);
  ASSERT_EQ(response.hits_size(), 1);
  EXPECT_EQ(*FromProto(response.hits(0).key()), keys[0]);
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

  v1::LookupRequest both_token_fields;
  *both_token_fields.mutable_layout() = ToProto(TestLayout());
  both_token_fields.add_tokens(1);
  both_token_fields.add_tokens_fixed32(1);
  const grpc::Status both_status = Lookup(both_token_fields, response);
  EXPECT_EQ(both_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(both_status.error_message(), ::testing::HasSubstr("not in both"));

  v1::LookupRequest too_many_fixed32;
  *too_many_fixed32.mutable_layout() = ToProto(TestLayout());
  for (int i = 0; i < 1001; ++i) too_many_fixed32.add_tokens_fixed32(i);
  EXPECT_EQ(Lookup(too_many_fixed32, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::LookupRequest short_digest;
  v1::ChunkKey* key = short_digest.add_keys();
  *key = ToProto(hasher_->PrefixKeys(std::vector<uint32_t>(16, 1), {})[0]);
  key->set_digest("abc");
  EXPECT_EQ(Lookup(short_digest, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // More keys than the daemon accepts (65536 by default).
  v1::LookupRequest too_many_keys;
  const v1::ChunkKey one = ToProto(hasher_->PrefixKeys(std::vector<uint32_t>(16, 1), {})[0]);
  for (int i = 0; i < 65537; ++i) *too_many_keys.add_keys() = one;
  EXPECT_EQ(Lookup(too_many_keys, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Bytes that are no LookupRequest: a truncated key, a field with a bad wire type, a zero tag,
  // and (found by tests/fuzz/control_lookup_fuzz) a tag cut short, a tag longer than 5 bytes, one
  // inside an unknown group or a key, and a key longer than the bytes left; a group inside a key
  // is refused too.
  grpc::GenericStub generic(channel_);
  const std::string whole = short_digest.SerializeAsString();
  const auto keys_field = [](const std::string& key, size_t claimed_extra = 0) {
    std::string field = {'\x2a', static_cast<char>(key.size() + claimed_extra)};
    field.append(key);
    return field;
  };
  const std::string overlong_tag("\x88\x80\x80\x80\x80\x00\x01", 7);  // field 1 in 6 bytes
  for (const std::string& bytes :
       {whole.substr(0, whole.size() - 2), std::string("\x0f\x01"), std::string("\x00\x01", 2),
        std::string("\x8c\xf5"), std::string("\xe0\xf5\xff\xff\xff\xff\x08\x0a"),
        "\x63" + overlong_tag + "\x64", keys_field(overlong_tag + one.SerializeAsString()),
        keys_field(one.SerializeAsString() + "\x2b\x2c"), keys_field(one.SerializeAsString(), 5)}) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1), reply;
    grpc::ClientContext context;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&context, "/strata.v1.StrataControl/Lookup", {}, &request, &reply,
                      [&done](grpc::Status status) { done.set_value(std::move(status)); });
    const grpc::Status status = done.get_future().get();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  }
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

using ::testing::HasSubstr;
using Stub = v1::StrataControl::Stub;

std::vector<uint32_t> Tokens(size_t n, uint32_t first) {
  std::vector<uint32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST_F(ControlServiceTest, PinHardWithQuotaAndSoftWithTtl) {
  const std::vector<uint32_t> tokens = Tokens(40, 1);  // 16 + 16 + 8 tokens
  const std::vector<ChunkKey> keys = StoreChain(tokens);
  v1::PinRequest request;
  *request.mutable_selector() = TokenSelector(Tokens(32, 1));
  request.set_kind(v1::PIN_KIND_HARD);
  v1::PinResponse response;
  ASSERT_TRUE(Call(&Stub::Pin, request, response).ok());
  EXPECT_EQ(response.pinned_chunks(), 2u);
  EXPECT_EQ(response.pinned_bytes(), 2u * 4096);
  EXPECT_EQ(response.missing_chunks(), 0u);

  // The third chunk would exceed the 8 KiB quota: nothing more is pinned.
  *request.mutable_selector() = TokenSelector(tokens);
  grpc::Status over = Call(&Stub::Pin, request, response);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(over.error_message(), HasSubstr("quota"));
  EXPECT_EQ(tier_->Stats().hard_pinned_bytes, 2u * 4096);

  // A soft pin of the whole chain, with an uncached key among the selection.
  const ChunkKey uncached = hasher_->PrefixKeys(Tokens(16, 999), {})[0];
  const std::vector<ChunkKey> with_miss = {keys[2], uncached};
  v1::PinRequest soft;
  *soft.mutable_selector() = KeySelector(with_miss);
  soft.set_kind(v1::PIN_KIND_SOFT);
  soft.set_ttl_ms(5000);
  ASSERT_TRUE(Call(&Stub::Pin, soft, response).ok());
  EXPECT_EQ(response.pinned_chunks(), 1u);
  EXPECT_EQ(response.missing_chunks(), 1u);
  EXPECT_EQ(tier_->Stats().soft_pinned_bytes, TestLayout().chunk_bytes(8));
  clock_.Advance(std::chrono::milliseconds(5000));
  EXPECT_EQ(tier_->Stats().soft_pinned_bytes, 0u) << "the TTL passed";

  v1::UnpinRequest unpin;
  *unpin.mutable_selector() = TokenSelector(tokens);
  unpin.set_kind(v1::PIN_KIND_HARD);
  v1::UnpinResponse unpinned;
  ASSERT_TRUE(Call(&Stub::Unpin, unpin, unpinned).ok());
  EXPECT_EQ(unpinned.unpinned_chunks(), 3u);
  EXPECT_EQ(tier_->Stats().hard_pinned_bytes, 0u);
}

TEST_F(ControlServiceTest, BadPinsAndUnpins) {
  StoreChain(Tokens(16, 1));
  v1::PinResponse response;
  v1::PinRequest base;
  *base.mutable_selector() = TokenSelector(Tokens(16, 1));
  base.set_kind(v1::PIN_KIND_HARD);

  v1::PinRequest empty = base;
  empty.clear_selector();
  EXPECT_EQ(Call(&Stub::Pin, empty, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::PinRequest no_kind = base;
  no_kind.set_kind(v1::PIN_KIND_UNSPECIFIED);
  EXPECT_EQ(Call(&Stub::Pin, no_kind, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::PinRequest soft_no_ttl = base;
  soft_no_ttl.set_kind(v1::PIN_KIND_SOFT);
  EXPECT_EQ(Call(&Stub::Pin, soft_no_ttl, response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::PinRequest disk = base;
  disk.set_tier(v1::TIER_DISK);
  grpc::Status disk_status = Call(&Stub::Pin, disk, response);
  EXPECT_EQ(disk_status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(disk_status.error_message(), "disk tier not configured");
  v1::PinRequest bad_tier = base;
  bad_tier.set_tier(static_cast<v1::Tier>(42));
  EXPECT_EQ(Call(&Stub::Pin, bad_tier, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::PinRequest bad_layout = base;
  bad_layout.mutable_selector()->mutable_layout()->set_num_layers(0);
  EXPECT_EQ(Call(&Stub::Pin, bad_layout, response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::PinRequest too_many = base;
  for (uint32_t i = 0; i < 1000; ++i) too_many.mutable_selector()->add_tokens(i);
  EXPECT_EQ(Call(&Stub::Pin, too_many, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::PinRequest bad_key = base;
  bad_key.clear_selector();
  bad_key.mutable_selector()->add_keys()->set_digest("short");
  EXPECT_EQ(Call(&Stub::Pin, bad_key, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(tier_->Stats().hard_pinned_bytes, 0u) << "no bad request pinned anything";

  v1::UnpinRequest unpin;
  *unpin.mutable_selector() = TokenSelector(Tokens(16, 1));
  v1::UnpinResponse unpinned;
  EXPECT_EQ(Call(&Stub::Unpin, unpin, unpinned).error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << "no kind";
  unpin.set_kind(v1::PIN_KIND_SOFT);
  unpin.set_tier(v1::TIER_REMOTE);
  EXPECT_EQ(Call(&Stub::Unpin, unpin, unpinned).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ControlServiceTest, MoveWithinTheHostTierIsANoOpAndOtherTiersAreNotConfigured) {
  const std::vector<ChunkKey> keys = StoreChain(Tokens(16, 1));
  const std::vector<ChunkKey> selection = {keys[0], hasher_->PrefixKeys(Tokens(16, 50), {})[0]};
  v1::MoveRequest request;
  *request.mutable_selector() = KeySelector(selection);
  request.set_target(v1::TIER_HOST);
  v1::MoveResponse response;
  ASSERT_TRUE(Call(&Stub::Move, request, response).ok());
  EXPECT_EQ(response.moved_chunks(), 0u);
  EXPECT_EQ(response.already_in_target(), 1u);
  EXPECT_EQ(response.missing_chunks(), 1u);
  EXPECT_TRUE(tier_->Contains(keys[0]));

  request.set_target(v1::TIER_DISK);
  grpc::Status disk = Call(&Stub::Move, request, response);
  EXPECT_EQ(disk.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(disk.error_message(), "disk tier not configured");
  request.set_target(v1::TIER_DEVICE);
  EXPECT_EQ(Call(&Stub::Move, request, response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  request.set_target(v1::TIER_UNSPECIFIED);
  EXPECT_EQ(Call(&Stub::Move, request, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  request.set_target(v1::TIER_HOST);
  request.clear_selector();
  EXPECT_EQ(Call(&Stub::Move, request, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ControlServiceTest, ClearByTokensKeysLayoutAndAll) {
  const std::vector<ChunkKey> a = StoreChain(Tokens(48, 1));
  const std::vector<ChunkKey> b = StoreChain(Tokens(32, 500));
  KvLayout other_layout = TestLayout();
  other_layout.model_id = "other-model";
  const KeyHasher other = *KeyHasher::Create(other_layout, {});
  const ChunkKey foreign = other.PrefixKeys(Tokens(16, 1), {})[0];
  {
    auto r = tier_->Reserve(other_layout, foreign, {.num_tokens = 16});
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(tier_->Commit(std::move(r->reservation)).ok());
  }
  v1::ClearResponse response;

  v1::ClearRequest by_tokens;
  *by_tokens.mutable_selector() = TokenSelector(Tokens(32, 1));
  ASSERT_TRUE(Call(&Stub::Clear, by_tokens, response).ok());
  EXPECT_EQ(response.removed_chunks(), 2u);
  EXPECT_EQ(response.removed_bytes(), 2u * 4096);
  EXPECT_FALSE(tier_->Contains(a[0]));
  EXPECT_TRUE(tier_->Contains(a[2]));

  v1::ClearRequest by_keys;
  *by_keys.mutable_selector() = KeySelector(std::span(a).subspan(2));
  ASSERT_TRUE(Call(&Stub::Clear, by_keys, response).ok());
  EXPECT_EQ(response.removed_chunks(), 1u);

  v1::ClearRequest by_layout;
  *by_layout.mutable_layout() = ToProto(other_layout);
  ASSERT_TRUE(Call(&Stub::Clear, by_layout, response).ok());
  EXPECT_EQ(response.removed_chunks(), 1u);
  EXPECT_FALSE(tier_->Contains(foreign));
  EXPECT_TRUE(tier_->Contains(b[0]));

  v1::ClearRequest all;
  all.set_all(true);
  all.set_tier(v1::TIER_HOST);
  ASSERT_TRUE(Call(&Stub::Clear, all, response).ok());
  EXPECT_EQ(response.removed_chunks(), 2u);
  EXPECT_EQ(tier_->Stats().chunks, 0u);
  EXPECT_TRUE(tier_->CheckConsistency().ok());
}

TEST_F(ControlServiceTest, ClearAndListChunksByTenant) {
  // The salt is part of a prefix key: the same tokens make distinct chunks per tenant.
  const std::vector<ChunkKey> alice = StoreChain(Tokens(32, 1), "alice");
  const std::vector<ChunkKey> bob = StoreChain(Tokens(32, 1), "bob");
  const std::vector<ChunkKey> shared = StoreChain(Tokens(16, 1), "");
  for (size_t i = 0; i < alice.size(); ++i) EXPECT_NE(alice[i], bob[i]);
  EXPECT_NE(alice[0], shared[0]);

  v1::ListChunksRequest list;
  list.set_page_size(1);
  list.set_tenant("alice");
  EXPECT_EQ(ListAll(list), alice);
  list.set_tenant("");
  EXPECT_EQ(ListAll(list), shared);
  // A tenant with no chunk: an empty, complete listing.
  list.set_tenant("carol");
  v1::ListChunksResponse page;
  ASSERT_TRUE(Call(&Stub::ListChunks, list, page).ok());
  EXPECT_EQ(page.chunks_size(), 0);
  EXPECT_TRUE(page.next_page_token().empty());

  v1::ClearRequest clear;
  clear.set_tenant("alice");
  v1::ClearResponse response;
  ASSERT_TRUE(Call(&Stub::Clear, clear, response).ok());
  EXPECT_EQ(response.removed_chunks(), 2u);
  EXPECT_EQ(response.removed_bytes(), 2u * 4096);
  for (const ChunkKey& key : alice) EXPECT_FALSE(tier_->Contains(key));
  for (const ChunkKey& key : bob) EXPECT_TRUE(tier_->Contains(key));
  EXPECT_TRUE(tier_->Contains(shared[0]));
  ASSERT_TRUE(Call(&Stub::Clear, clear, response).ok());
  EXPECT_EQ(response.removed_chunks(), 0u);
  clear.set_tenant("");
  ASSERT_TRUE(Call(&Stub::Clear, clear, response).ok());
  EXPECT_EQ(response.removed_chunks(), 1u);
  list.set_tenant("bob");
  EXPECT_EQ(ListAll(list), bob);

  // A tenant is a selection of its own.
  clear.set_all(true);
  EXPECT_EQ(Call(&Stub::Clear, clear, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(tier_->CheckConsistency().ok());
}

TEST_F(ControlServiceTest, BadClears) {
  v1::ClearResponse response;
  EXPECT_EQ(Call(&Stub::Clear, v1::ClearRequest(), response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClearRequest two;
  two.set_all(true);
  *two.mutable_layout() = ToProto(TestLayout());
  EXPECT_EQ(Call(&Stub::Clear, two, response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClearRequest empty_selector;
  empty_selector.mutable_selector();
  EXPECT_EQ(Call(&Stub::Clear, empty_selector, response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClearRequest bad_layout;
  *bad_layout.mutable_layout() = ToProto(TestLayout());
  bad_layout.mutable_layout()->set_kind(static_cast<v1::KvKind>(9));
  EXPECT_EQ(Call(&Stub::Clear, bad_layout, response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::ClearRequest disk;
  disk.set_all(true);
  disk.set_tier(v1::TIER_DISK);
  EXPECT_EQ(Call(&Stub::Clear, disk, response).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// A reader holds a lease while Clear runs: the chunk leaves the index at once, but its pages
// keep their bytes, unreused by new stores, until the lease is released.
TEST_F(ControlServiceTest, ClearDuringALoadNeverFreesUnderTheReader) {
  const std::vector<ChunkKey> keys = StoreChain(Tokens(16, 1));
  absl::StatusOr<std::optional<storage::ChunkLease>> lease = tier_->Acquire(keys[0]);
  ASSERT_TRUE(lease.ok() && lease->has_value());
  std::vector<std::byte> before((*lease)->size_bytes());
  (*lease)->payload().CopyTo(before);

  v1::ClearRequest all;
  all.set_all(true);
  v1::ClearResponse response;
  ASSERT_TRUE(Call(&Stub::Clear, all, response).ok());
  EXPECT_EQ(response.removed_chunks(), 1u);
  EXPECT_FALSE(tier_->Contains(keys[0]));
  EXPECT_EQ(tier_->Stats().pending_free_bytes, 4096u);

  // Store three tiers' worth of new chunks (evicting all the while): the leased pages must never
  // be handed out.
  for (uint32_t i = 0; i < 3 * 64; ++i) {
    const ChunkKey key = hasher_->PrefixKeys(Tokens(16, 10000 + 16 * i), {})[0];
    absl::StatusOr<storage::ReserveResult> r =
        tier_->Reserve(TestLayout(), key, {.num_tokens = 16});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<std::byte> junk(r->reservation.size_bytes(), std::byte{0xEE});
    r->reservation.payload().CopyFrom(junk);
    ASSERT_TRUE(tier_->Commit(std::move(r->reservation)).ok());
  }
  EXPECT_EQ(tier_->Stats().chunks, 63u) << "64 pages, one still read by the lease";
  std::vector<std::byte> after((*lease)->size_bytes());
  (*lease)->payload().CopyTo(after);
  EXPECT_EQ(before, after);

  (*lease)->Release();
  EXPECT_EQ(tier_->Stats().pending_free_bytes, 0u);
  EXPECT_TRUE(tier_->CheckConsistency().ok());
}

TEST_F(ControlServiceTest, CompressesHostChunksInPlaceWithoutADiskTier) {
  StoreChain(Tokens(32, 1));
  v1::CompressRequest compress;
  *compress.mutable_selector() = TokenSelector(Tokens(32, 1));
  compress.set_codec("int8");
  v1::CompressResponse compressed;
  grpc::Status status = Call(&Stub::Compress, compress, compressed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("disk tier not configured"));
  compress.set_tier(v1::TIER_HOST);
  status = Call(&Stub::Compress, compress, compressed);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(compressed.compressed_chunks(), 2u);
  EXPECT_EQ(compressed.busy_chunks(), 0u);
  EXPECT_EQ(compressed.stored_bytes_before(), 2 * 4096u);
  EXPECT_LT(compressed.stored_bytes_after(), 2 * 4096u * 7 / 10);  // 16-wide heads: 0.65x

  v1::ListChunksRequest list;
  list.set_tier(v1::TIER_HOST);
  v1::ListChunksResponse listed;
  ASSERT_TRUE(Call(&Stub::ListChunks, list, listed).ok());
  ASSERT_EQ(listed.chunks_size(), 2);
  for (const v1::ChunkEntry& entry : listed.chunks()) {
    EXPECT_EQ(entry.codec(), "int8");
    EXPECT_EQ(entry.size_bytes(), 4096u);
    EXPECT_LT(entry.stored_bytes(), 4096u);
    EXPECT_TRUE(entry.has_relative_error());
  }
  v1::StatsResponse stats;
  ASSERT_TRUE(Call(&Stub::Stats, v1::StatsRequest(), stats).ok());
  EXPECT_EQ(stats.tiers(0).encoded_chunks(), 2u);
  EXPECT_EQ(stats.tiers(0).payload_bytes(), 2 * 4096u);
  EXPECT_EQ(stats.tiers(0).stored_bytes(), compressed.stored_bytes_after());

  v1::DecompressRequest decompress;
  *decompress.mutable_selector() = TokenSelector(Tokens(32, 1));
  v1::DecompressResponse decompressed;
  EXPECT_EQ(Call(&Stub::Decompress, decompress, decompressed).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  decompress.set_tier(v1::TIER_HOST);
  ASSERT_TRUE(Call(&Stub::Decompress, decompress, decompressed).ok());
  EXPECT_EQ(decompressed.decompressed_chunks(), 2u);
  EXPECT_EQ(decompressed.stored_bytes_after(), 2 * 4096u);
  ASSERT_TRUE(Call(&Stub::ListChunks, list, listed).ok());
  EXPECT_EQ(listed.chunks(0).codec(), "");
  EXPECT_TRUE(tier_->CheckConsistency().ok());
}

// drop_sink_recent thins a position-free (nope) host chunk to its sink block and recent window,
// which the device pool serves at their positions; what cannot be thinned or restored is refused.
TEST_F(ControlServiceTest, ThinsPositionFreeHostChunksAndRefusesTheRest) {
  KvLayout nope = TestLayout();
  nope.positional = PositionalFormat::kNope;
  nope.chunk_tokens = 64;
  const ChunkKey key = KeyHasher::Create(nope, {})->PicKey(Tokens(64, 1), 0);
  {
    absl::StatusOr<storage::ReserveResult> r = tier_->Reserve(nope, key, {.num_tokens = 64});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<std::byte> kv(r->reservation.payload().size_bytes());
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = std::byte(i * 7 % 251);
    r->reservation.payload().CopyFrom(kv);
    ASSERT_TRUE(tier_->Commit(std::move(r->reservation)).ok());
  }
  v1::CompressRequest compress;
  *compress.mutable_selector() = KeySelector(std::vector<ChunkKey>{key});
  *compress.mutable_selector()->mutable_layout() = ToProto(nope);
  compress.set_tier(v1::TIER_HOST);
  v1::CompressResponse compressed;

  // drop_h2o keeps the blocks engines reported heaviest: with no report, the chunk stays whole.
  compress.set_codec("drop_h2o");
  grpc::Status status = Call(&Stub::Compress, compress, compressed);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(compressed.no_importance_chunks(), 1u);
  EXPECT_EQ(compressed.compressed_chunks(), 0u);
  EXPECT_FALSE(tier_->HoldsEncoded(key));
  // The disk tier keeps no thinned chunk.
  compress.set_codec("drop_sink_recent");
  compress.set_tier(v1::TIER_DISK);
  EXPECT_EQ(Call(&Stub::Compress, compress, compressed).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  // heavy_tokens reaches the codec: drop_sink_recent keeps no heavy hitters.
  compress.set_tier(v1::TIER_HOST);
  compress.mutable_params()->set_heavy_tokens(16);
  status = Call(&Stub::Compress, compress, compressed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("heavy_tokens"));
  EXPECT_FALSE(tier_->HoldsEncoded(key));
  compress.mutable_params()->set_heavy_tokens(0);

  // Blocks 0 and 3 of 4 kept: half the chunk, and a small frame.
  compress.mutable_params()->set_sink_tokens(16);
  compress.mutable_params()->set_recent_tokens(16);
  status = Call(&Stub::Compress, compress, compressed);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(compressed.compressed_chunks(), 1u);
  EXPECT_EQ(compressed.stored_bytes_before(), 4 * 4096u);
  EXPECT_LT(compressed.stored_bytes_after(), 4 * 4096u * 6 / 10);
  v1::ListChunksRequest list;
  list.set_tier(v1::TIER_HOST);
  v1::ListChunksResponse listed;
  ASSERT_TRUE(Call(&Stub::ListChunks, list, listed).ok());
  ASSERT_EQ(listed.chunks_size(), 1);
  EXPECT_EQ(listed.chunks(0).codec(), "drop_sink_recent");
  EXPECT_FALSE(listed.chunks(0).has_relative_error()) << "dropped tokens have no decoded value";

  // Its dropped tokens cannot come back.
  v1::DecompressRequest decompress;
  *decompress.mutable_selector() = compress.selector();
  decompress.set_tier(v1::TIER_HOST);
  v1::DecompressResponse decompressed;
  status = Call(&Stub::Decompress, decompress, decompressed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("cannot be restored"));
  EXPECT_TRUE(tier_->HoldsEncoded(key)) << "left as it was";

  // A rope_applied chunk's tokens cannot be dropped at all.
  StoreChain(Tokens(16, 1));
  *compress.mutable_selector() = TokenSelector(Tokens(16, 1));
  status = Call(&Stub::Compress, compress, compressed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("RoPE"));
  EXPECT_TRUE(tier_->CheckConsistency().ok());
}

TEST_F(ControlServiceTest, ListChunksPagesAndFilters) {
  const std::vector<ChunkKey> keys = StoreChain(Tokens(16 * 5, 1));
  ASSERT_TRUE(tier_->Pin(keys[1], {}).ok());
  ASSERT_TRUE(
      tier_->Pin(keys[2], {.kind = storage::PinKind::kSoft, .ttl = std::chrono::milliseconds(1500)})
          .ok());
  v1::ListChunksRequest request;
  request.set_page_size(2);
  std::vector<v1::ChunkEntry> listed;
  int pages = 0;
  v1::ListChunksResponse response;
  do {
    ASSERT_TRUE(Call(&Stub::ListChunks, request, response).ok());
    listed.insert(listed.end(), response.chunks().begin(), response.chunks().end());
    request.set_page_token(response.next_page_token());
    ++pages;
  } while (!response.next_page_token().empty());
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(listed.size(), 5u);
  for (size_t i = 0; i < listed.size(); ++i) {
    EXPECT_EQ(*FromProto(listed[i].key()), keys[i]);
    EXPECT_EQ(listed[i].tier(), v1::TIER_HOST);
    EXPECT_EQ(listed[i].num_tokens(), 16u);
    EXPECT_EQ(listed[i].size_bytes(), 4096u);
  }
  EXPECT_TRUE(listed[1].hard_pinned());
  EXPECT_EQ(listed[2].soft_pin_remaining_ms(), 1500u);
  EXPECT_EQ(listed[3].soft_pin_remaining_ms(), 0u);

  v1::ListChunksRequest other_layout;
  other_layout.set_layout_fingerprint(0x1234);
  ASSERT_TRUE(Call(&Stub::ListChunks, other_layout, response).ok());
  EXPECT_EQ(response.chunks_size(), 0);
  EXPECT_TRUE(response.next_page_token().empty());
  v1::ListChunksRequest same_layout;
  same_layout.set_layout_fingerprint(TestLayout().Fingerprint());
  same_layout.set_tier(v1::TIER_HOST);
  ASSERT_TRUE(Call(&Stub::ListChunks, same_layout, response).ok());
  EXPECT_EQ(response.chunks_size(), 5);

  v1::ListChunksRequest bad;
  bad.set_page_token("x17");
  EXPECT_EQ(Call(&Stub::ListChunks, bad, response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  bad.set_page_token("h12junk");
  EXPECT_EQ(Call(&Stub::ListChunks, bad, response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::ListChunksRequest oversized;
  oversized.set_page_size(ControlService::kMaxPageSize + 1);
  EXPECT_EQ(Call(&Stub::ListChunks, oversized, response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::ListChunksRequest disk;
  disk.set_tier(v1::TIER_DISK);
  EXPECT_EQ(Call(&Stub::ListChunks, disk, response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ControlServiceTest, ColumnarListChunksMatchesTheEntries) {
  // Two hash algorithms (16- and 32-byte digests) in one page, pins and a lease.
  const std::vector<ChunkKey> keys = StoreChain(Tokens(16 * 3, 1));
  const KeyHasher sha =
      *KeyHasher::Create(TestLayout(), {.algorithm = HashAlgorithm::kSha256Cbor, .seed = "0"});
  const ChunkKey sha_key = sha.PrefixKeys(Tokens(16, 7), {})[0];
  StoreChunk(sha_key, 16);
  ASSERT_TRUE(tier_->Pin(keys[0], {}).ok());
  ASSERT_TRUE(
      tier_->Pin(keys[1], {.kind = storage::PinKind::kSoft, .ttl = std::chrono::milliseconds(900)})
          .ok());
  auto lease = tier_->Acquire(keys[2]);
  ASSERT_TRUE(lease.ok() && lease->has_value());

  v1::ListChunksRequest request;
  request.set_page_size(3);
  v1::ListChunksResponse rows;
  ASSERT_TRUE(Call(&Stub::ListChunks, request, rows).ok());
  request.set_columnar(true);
  v1::ListChunksResponse columnar;
  ASSERT_TRUE(Call(&Stub::ListChunks, request, columnar).ok());
  EXPECT_EQ(columnar.chunks_size(), 0);
  EXPECT_EQ(columnar.next_page_token(), rows.next_page_token());
  request.set_page_token(columnar.next_page_token());
  v1::ListChunksResponse rest;
  ASSERT_TRUE(Call(&Stub::ListChunks, request, rest).ok());
  EXPECT_TRUE(rest.next_page_token().empty());
  ASSERT_EQ(rest.columns().algorithms_size(), 1);
  EXPECT_EQ(rest.columns().algorithms(0), v1::HASH_ALGORITHM_SHA256_CBOR);
  EXPECT_EQ(rest.columns().digests(),
            std::string(reinterpret_cast<const char*>(sha_key.digest().data()), 32));

  const v1::ChunkColumns& c = columnar.columns();
  ASSERT_EQ(rows.chunks_size(), 3);
  for (const int size : {c.algorithms_size(), c.namespaces_size(), c.layout_fingerprints_size(),
                         c.tiers_size(), c.size_bytes_size(), c.num_tokens_size(),
                         c.hard_pinned_size(), c.soft_pin_remaining_ms_size(), c.leases_size()}) {
    EXPECT_EQ(size, 3);
  }
  ASSERT_EQ(c.digests().size(), 3u * 16);
  for (int i = 0; i < 3; ++i) {
    const v1::ChunkEntry& row = rows.chunks(i);
    EXPECT_EQ(c.algorithms(i), row.key().algorithm());
    EXPECT_EQ(c.namespaces(i), row.key().namespace_());
    EXPECT_EQ(c.layout_fingerprints(i), row.key().layout_fingerprint());
    EXPECT_EQ(c.digests().substr(16 * i, 16), row.key().digest());
    EXPECT_EQ(c.tiers(i), row.tier());
    EXPECT_EQ(c.size_bytes(i), row.size_bytes());
    EXPECT_EQ(c.num_tokens(i), row.num_tokens());
    EXPECT_EQ(c.hard_pinned(i), row.hard_pinned());
    EXPECT_EQ(c.soft_pin_remaining_ms(i), row.soft_pin_remaining_ms());
    EXPECT_EQ(c.leases(i), row.leases());
  }
  EXPECT_TRUE(c.hard_pinned(0));
  EXPECT_EQ(c.soft_pin_remaining_ms(1), 900u);
  EXPECT_EQ(c.leases(2), 1u);
}

TEST_F(ControlServiceTest, DrainStopsAdmittingAndReports) {
  StoreChain(Tokens(32, 1));
  v1::DrainResponse drained;
  ASSERT_TRUE(Call(&Stub::Drain, v1::DrainRequest(), drained).ok());
  EXPECT_EQ(drained.resident_chunks(), 2u);
  EXPECT_EQ(drained.resident_bytes(), 2u * 4096);
  EXPECT_EQ(drained.flushed_chunks(), 0u);
  const ChunkKey fresh = hasher_->PrefixKeys(Tokens(16, 700), {})[0];
  EXPECT_EQ(tier_->Reserve(TestLayout(), fresh, {.num_tokens = 16}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::HealthResponse health;
  ASSERT_TRUE(Call(&Stub::Health, v1::HealthRequest(), health).ok());
  EXPECT_EQ(health.status(), v1::HealthResponse::SERVING_STATUS_DRAINING);
  ASSERT_TRUE(Call(&Stub::Drain, v1::DrainRequest(), drained).ok()) << "idempotent";
}

TEST_F(ControlServiceTest, StatsAreTheEnginesLookupsAndCountControlLookupsApart) {
  StoreChain(Tokens(32, 1));
  v1::LookupRequest lookup;
  *lookup.mutable_layout() = ToProto(TestLayout());
  for (uint32_t t : Tokens(40, 1)) lookup.add_tokens(t);
  v1::LookupResponse looked_up;
  ASSERT_TRUE(Lookup(lookup, looked_up).ok());
  v1::StatsResponse stats;
  ASSERT_TRUE(Call(&Stub::Stats, v1::StatsRequest(), stats).ok());
  ASSERT_EQ(stats.tiers_size(), 1);
  EXPECT_EQ(stats.control_lookups().lookups(), 1u);
  EXPECT_EQ(stats.control_lookups().hit_tokens(), 32u);
  EXPECT_EQ(stats.control_lookups().miss_tokens(), 8u);
  EXPECT_EQ(stats.lookups(), 0u) << "no engine looked anything up";
  EXPECT_EQ(stats.tiers(0).hit_tokens(), 0u);
  EXPECT_EQ(stats.tiers(0).io_errors(), 0u);

  // What two engines' sessions recorded (engine_session_server_test checks that they do).
  lookups_.Record(LookupSource::kEngine, "a", {0, 64, 0, 0}, 16);
  lookups_.Record(LookupSource::kEngine, "", {0, 48, 0, 0}, 0);
  ASSERT_TRUE(Call(&Stub::Stats, v1::StatsRequest(), stats).ok());
  EXPECT_EQ(stats.lookups(), 2u);
  EXPECT_EQ(stats.hit_tokens(), 112u);
  EXPECT_EQ(stats.miss_tokens(), 16u);
  EXPECT_EQ(stats.tiers(0).hit_tokens(), 112u);
  EXPECT_EQ(stats.tiers(0).miss_tokens(), 16u);
  ASSERT_EQ(stats.tenants_size(), 2);
  EXPECT_EQ(stats.tenants(0).tenant(), "");
  EXPECT_EQ(stats.tenants(0).totals().hit_tokens(), 48u);
  EXPECT_EQ(stats.tenants(1).tenant(), "a");
  EXPECT_EQ(stats.tenants(1).totals().miss_tokens(), 16u);
  EXPECT_EQ(stats.control_lookups().lookups(), 1u);
}

// A WatchEvents stream with a deadline, read response by response.
class EventStream {
 public:
  EventStream(v1::StrataControl::Stub& stub, uint64_t from_sequence) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::WatchEventsRequest request;
    request.set_from_sequence(from_sequence);
    reader_ = stub.WatchEvents(&context_, request);
  }
  ~EventStream() {
    if (finished_) return;
    context_.TryCancel();
    v1::WatchEventsResponse ignored;
    while (reader_->Read(&ignored)) {
    }
    reader_->Finish().IgnoreError();
  }

  // The next response; nullopt when the stream ended (status() says why).
  std::optional<v1::WatchEventsResponse> Next() {
    v1::WatchEventsResponse response;
    if (!reader_->Read(&response)) return std::nullopt;
    return response;
  }
  // Reads responses until `count` events arrived (or the stream ends).
  std::vector<v1::ChunkEvent> Events(size_t count) {
    std::vector<v1::ChunkEvent> events;
    while (events.size() < count) {
      std::optional<v1::WatchEventsResponse> response = Next();
      if (!response.has_value()) break;
      next_sequence_ = response->next_sequence();
      events.insert(events.end(), response->events().begin(), response->events().end());
    }
    return events;
  }
  grpc::Status status() {
    finished_ = true;
    return reader_->Finish();
  }
  uint64_t next_sequence() const { return next_sequence_; }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::WatchEventsResponse>> reader_;
  uint64_t next_sequence_ = 0;
  bool finished_ = false;
};

TEST_F(ControlServiceTest, WatchEventsStreamsStoresRemovalsAndClears) {
  EventStream stream(*stub_, 0);
  std::optional<v1::WatchEventsResponse> first = stream.Next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->events_size(), 0);
  EXPECT_EQ(first->next_sequence(), 1u);
  EXPECT_EQ(first->epoch(), events_.epoch());

  const std::vector<ChunkKey> keys = StoreChain(Tokens(24, 1));  // 16 + 8 tokens
  v1::ClearRequest by_keys;
  *by_keys.mutable_selector() = KeySelector(std::span(keys).first(1));
  v1::ClearResponse cleared;
  ASSERT_TRUE(Call(&Stub::Clear, by_keys, cleared).ok());
  v1::ClearRequest all;
  all.set_all(true);
  ASSERT_TRUE(Call(&Stub::Clear, all, cleared).ok());

  const std::vector<v1::ChunkEvent> events = stream.Events(4);
  ASSERT_EQ(events.size(), 4u);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), i + 1);
    EXPECT_EQ(events[i].tier(), v1::TIER_HOST);
  }
  ASSERT_TRUE(events[0].has_stored());
  EXPECT_EQ(*FromProto(events[0].stored().key()), keys[0]);
  EXPECT_EQ(events[0].stored().num_tokens(), 16u);
  ASSERT_TRUE(events[1].has_stored());
  EXPECT_EQ(events[1].stored().num_tokens(), 8u);
  ASSERT_TRUE(events[2].has_removed());
  EXPECT_EQ(*FromProto(events[2].removed().key()), keys[0]);
  EXPECT_EQ(events[2].removed().cause(), v1::ChunkEvent::REMOVAL_CAUSE_REMOVED);
  EXPECT_TRUE(events[3].has_cleared());
  EXPECT_EQ(stream.next_sequence(), 5u);
}

TEST_F(ControlServiceTest, WatchEventsResumeAfterAReconnectWithoutGaps) {
  uint64_t resume_at = 0;
  std::vector<uint64_t> seen;
  {
    EventStream stream(*stub_, 1);
    StoreChain(Tokens(16 * 3, 1));
    for (const v1::ChunkEvent& event : stream.Events(3)) seen.push_back(event.sequence());
    resume_at = stream.next_sequence();
  }                                  // disconnected
  StoreChain(Tokens(16 * 4, 1000));  // happens while nobody watches
  EventStream resumed(*stub_, resume_at);
  StoreChain(Tokens(16 * 2, 5000));  // and after the reconnect
  for (const v1::ChunkEvent& event : resumed.Events(6)) seen.push_back(event.sequence());
  std::vector<uint64_t> expected(9);
  std::iota(expected.begin(), expected.end(), 1);
  EXPECT_EQ(seen, expected) << "every event once, in order";
}

TEST_F(ControlServiceTest, WatchEventsOutsideTheRingIsOutOfRange) {
  for (uint32_t i = 0; i < 20; ++i) StoreChain(Tokens(16, 100 * i));  // 20 events; 16 kept
  EventStream too_old(*stub_, 1);
  EXPECT_FALSE(too_old.Next().has_value());
  grpc::Status old_status = too_old.status();
  EXPECT_EQ(old_status.error_code(), grpc::StatusCode::OUT_OF_RANGE);
  EXPECT_THAT(old_status.error_message(), HasSubstr("retains events 5..20"));

  EventStream future(*stub_, 22);
  EXPECT_FALSE(future.Next().has_value());
  EXPECT_EQ(future.status().error_code(), grpc::StatusCode::OUT_OF_RANGE);

  EventStream oldest_kept(*stub_, 5);
  const std::vector<v1::ChunkEvent> events = oldest_kept.Events(16);
  ASSERT_EQ(events.size(), 16u);
  EXPECT_EQ(events.front().sequence(), 5u);
  EXPECT_EQ(events.back().sequence(), 20u);
}

// A service that requires a bearer token over TCP, also served on a Unix socket.
class ControlServiceAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    storage::HostTierOptions options;
    options.capacity_bytes = 16 * 4096;
    options.page_bytes = 4096;
    store_ = *storage::TieredStore::Create({.host = options});
    ControlServiceOptions service_options;
    service_options.store = store_.get();
    service_options.events = &events_;
    service_options.bearer_token = "s3cret";
    service_ = std::make_unique<ControlService>(std::move(service_options));
    socket_path_ = ::testing::TempDir() + "/strata-auth-test.sock";
    std::remove(socket_path_.c_str());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.AddListeningPort("unix:" + socket_path_, grpc::InsecureServerCredentials());
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(port, 0);
    tcp_ = v1::StrataControl::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                                          grpc::InsecureChannelCredentials()));
    unix_ = v1::StrataControl::NewStub(
        grpc::CreateChannel("unix:" + socket_path_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    std::remove(socket_path_.c_str());
  }

  static grpc::Status Stats(v1::StrataControl::Stub& stub, const std::string& authorization) {
    grpc::ClientContext context;
    if (!authorization.empty()) context.AddMetadata("authorization", authorization);
    v1::StatsResponse response;
    return stub.Stats(&context, v1::StatsRequest(), &response);
  }

  EventLog events_{16};
  std::unique_ptr<storage::TieredStore> store_;
  std::unique_ptr<ControlService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string socket_path_;
  std::unique_ptr<v1::StrataControl::Stub> tcp_;
  std::unique_ptr<v1::StrataControl::Stub> unix_;
};

TEST_F(ControlServiceAuthTest, TcpCallersNeedTheBearerToken) {
  EXPECT_EQ(Stats(*tcp_, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Stats(*tcp_, "Bearer wrong!").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Stats(*tcp_, "Bearer s3cret-and-more").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(Stats(*tcp_, "Bearer s3cret").ok());
  EXPECT_TRUE(Stats(*unix_, "").ok()) << "the Unix socket is guarded by file permissions";

  grpc::ClientContext context;
  v1::PinRequest pin;
  v1::PinResponse pinned;
  EXPECT_EQ(tcp_->Pin(&context, pin, &pinned).error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << "checked before the request is validated";

  grpc::ClientContext watch_context;
  auto reader = tcp_->WatchEvents(&watch_context, v1::WatchEventsRequest());
  v1::WatchEventsResponse response;
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

class ControlServiceDiskTest : public ControlServiceTest {
 protected:
  std::optional<storage::TieredDiskOptions> DiskOptions() override {
    return storage::TieredDiskOptions{
        .directory = scratch_.path(), .capacity_bytes = 1 << 20, .segment_bytes = 64 << 10};
  }
  bool OnDisk(const ChunkKey& key) const {
    const std::vector<storage::Tier> tiers = store_->TiersOf(key);
    return std::find(tiers.begin(), tiers.end(), storage::Tier::kDisk) != tiers.end();
  }

  storage::testing::ScratchDir scratch_;
};

TEST_F(ControlServiceDiskTest, EnginesDiskHitsCountUnderTheDiskTier) {
  lookups_.Record(LookupSource::kEngine, "", {0, 32, 16, 0}, 8);
  v1::StatsResponse stats;
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Stats, v1::StatsRequest(), stats).ok());
  ASSERT_EQ(stats.tiers_size(), 2);
  EXPECT_EQ(stats.tiers(0).hit_tokens(), 32u);
  EXPECT_EQ(stats.tiers(0).miss_tokens(), 24u);
  EXPECT_EQ(stats.tiers(1).tier(), v1::TIER_DISK);
  EXPECT_EQ(stats.tiers(1).hit_tokens(), 16u);
  EXPECT_EQ(stats.tiers(1).miss_tokens(), 40u);
  EXPECT_EQ(stats.tiers(1).hits(), 0u) << "no load promoted a chunk from disk";
  EXPECT_EQ(stats.hit_tokens(), 48u);
  EXPECT_EQ(stats.miss_tokens(), 8u);
}

TEST_F(ControlServiceDiskTest, MoveLookupStatsClearAndDrainSpanTheDiskTier) {
  std::vector<uint32_t> tokens(48);
  std::iota(tokens.begin(), tokens.end(), 7);
  const std::vector<ChunkKey> keys = StoreChain(tokens);
  ASSERT_EQ(keys.size(), 3u);

  // Move the middle chunk to disk: the prefix still spans all three, host / disk / host.
  v1::MoveRequest move;
  *move.mutable_selector() = KeySelector(std::span(keys).subspan(1, 1));
  move.set_target(v1::TIER_DISK);
  v1::MoveResponse moved;
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Move, move, moved).ok());
  EXPECT_EQ(moved.moved_chunks(), 1u);
  EXPECT_FALSE(tier_->Contains(keys[1]));
  EXPECT_TRUE(OnDisk(keys[1]));
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Move, move, moved).ok());
  EXPECT_EQ(moved.already_in_target(), 1u);

  v1::LookupRequest lookup;
  *lookup.mutable_layout() = ToProto(TestLayout());
  for (uint32_t t : tokens) lookup.add_tokens(t);
  v1::LookupResponse found;
  ASSERT_TRUE(Lookup(lookup, found).ok());
  EXPECT_EQ(found.matched_chunks(), 3u);
  EXPECT_THAT(found.chunk_tiers(),
              testing::ElementsAre(v1::TIER_HOST, v1::TIER_DISK, v1::TIER_HOST));

  v1::StatsResponse stats;
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Stats, v1::StatsRequest(), stats).ok());
  ASSERT_EQ(stats.tiers_size(), 2);
  EXPECT_EQ(stats.tiers(1).tier(), v1::TIER_DISK);
  EXPECT_EQ(stats.tiers(1).chunks(), 1u);

  // Back to the host tier: by keys there is no layout to size the chunk with.
  move.set_target(v1::TIER_HOST);
  EXPECT_EQ(Call(&v1::StrataControl::Stub::Move, move, moved).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  move.clear_selector();
  *move.mutable_selector() = TokenSelector(tokens);
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Move, move, moved).ok());
  EXPECT_EQ(moved.moved_chunks(), 1u);
  EXPECT_EQ(moved.already_in_target(), 2u);
  EXPECT_TRUE(tier_->Contains(keys[1]));
  EXPECT_FALSE(OnDisk(keys[1]));

  // Pins are host-only.
  v1::PinRequest pin;
  *pin.mutable_selector() = KeySelector(keys);
  pin.set_kind(v1::PIN_KIND_SOFT);
  pin.set_ttl_ms(1000);
  pin.set_tier(v1::TIER_DISK);
  v1::PinResponse pinned;
  grpc::Status pin_status = Call(&v1::StrataControl::Stub::Pin, pin, pinned);
  EXPECT_EQ(pin_status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(pin_status.error_message(), "pins apply to the host tier only");
  // A disk tier is not every tier: the others are still not configured.
  move.set_target(v1::TIER_REMOTE);
  grpc::Status remote = Call(&v1::StrataControl::Stub::Move, move, moved);
  EXPECT_EQ(remote.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(remote.error_message(), "remote tier not configured");
  v1::ListChunksRequest list;
  list.set_tier(v1::TIER_REMOTE);
  v1::ListChunksResponse listed;
  EXPECT_EQ(Call(&v1::StrataControl::Stub::ListChunks, list, listed).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);

  // Drain writes every host chunk to disk; Clear of every tier empties both.
  v1::DrainResponse drained;
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Drain, v1::DrainRequest(), drained).ok());
  EXPECT_EQ(drained.flushed_chunks(), 3u);
  for (const ChunkKey& key : keys) EXPECT_TRUE(OnDisk(key));
  v1::ClearRequest clear;
  clear.set_all(true);
  v1::ClearResponse cleared;
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Clear, clear, cleared).ok());
  EXPECT_EQ(cleared.removed_chunks(), 6u);  // three in each tier
  ASSERT_TRUE(Lookup(lookup, found).ok());
  EXPECT_EQ(found.matched_chunks(), 0u);
}

TEST_F(ControlServiceDiskTest, CompressAndDecompressTheDiskTiersChunks) {
  const std::vector<uint32_t> tokens = Tokens(16 * 3, 1);
  const std::vector<ChunkKey> keys = StoreChain(tokens);
  ASSERT_EQ(*store_->FlushToLowerTiers(), 3u);

  v1::CompressRequest compress;
  *compress.mutable_selector() = KeySelector(keys);
  v1::CompressResponse compressed;
  compress.set_codec("zip");
  grpc::Status status = Call(&Stub::Compress, compress, compressed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("zip"));
  // A token-dropping codec: no tier keeps chunks it could not restore whole.
  for (const char* dropping : {"drop_sink_recent", "drop_h2o"}) {
    compress.set_codec(dropping);
    status = Call(&Stub::Compress, compress, compressed);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << dropping;
    EXPECT_THAT(status.error_message(), HasSubstr("drops tokens")) << dropping;
  }

  // By keys alone: no engine announced the layout here, so the disk cannot encode them.
  compress.set_codec("int8");
  ASSERT_TRUE(Call(&Stub::Compress, compress, compressed).ok());
  EXPECT_EQ(compressed.compressed_chunks(), 0u);
  EXPECT_EQ(compressed.unknown_layout_chunks(), 3u);

  // Bad parameters: refused, nothing changed.
  *compress.mutable_selector() = TokenSelector(tokens);
  compress.mutable_params()->set_bits(4);
  status = Call(&Stub::Compress, compress, compressed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("bits"));
  compress.mutable_params()->set_bits(0);

  // With the selector's layout: every chunk is encoded, in the default tier (disk).
  ASSERT_TRUE(Call(&Stub::Compress, compress, compressed).ok());
  EXPECT_EQ(compressed.compressed_chunks(), 3u);
  EXPECT_EQ(compressed.stored_bytes_before(), 3u * 4096);
  EXPECT_LT(compressed.stored_bytes_after(), compressed.stored_bytes_before());
  EXPECT_FALSE(compressed.error_bound().empty());
  const double max_error = compressed.max_relative_error();
  const uint64_t stored_after = compressed.stored_bytes_after();
  ASSERT_TRUE(Call(&Stub::Compress, compress, compressed).ok());
  EXPECT_EQ(compressed.compressed_chunks(), 0u);
  EXPECT_EQ(compressed.already_compressed(), 3u);

  // Listed with their codec and stored size; Stats counts them.
  v1::ListChunksRequest list;
  list.set_tier(v1::TIER_DISK);
  v1::ListChunksResponse page;
  ASSERT_TRUE(Call(&Stub::ListChunks, list, page).ok());
  ASSERT_EQ(page.chunks_size(), 3);
  for (const v1::ChunkEntry& entry : page.chunks()) {
    EXPECT_EQ(entry.codec(), "int8");
    EXPECT_EQ(entry.size_bytes(), 4096u);
    EXPECT_LT(entry.stored_bytes(), 4096u);
    EXPECT_TRUE(entry.has_relative_error());
    EXPECT_LE(entry.relative_error(), max_error + 1e-6);
  }
  list.set_columnar(true);
  ASSERT_TRUE(Call(&Stub::ListChunks, list, page).ok());
  ASSERT_EQ(page.columns().codec_ids_size(), 3);
  EXPECT_EQ(page.columns().codec_ids(0), static_cast<uint32_t>(storage::CodecId::kInt8));
  v1::StatsResponse stats;
  ASSERT_TRUE(Call(&Stub::Stats, v1::StatsRequest(), stats).ok());
  ASSERT_EQ(stats.tiers_size(), 2);
  EXPECT_EQ(stats.tiers(1).encoded_chunks(), 3u);
  EXPECT_EQ(stats.tiers(1).stored_bytes(), stored_after);
  EXPECT_EQ(stats.tiers(1).payload_bytes(), 3u * 4096);

  // Decompressed: stored as they decode again.
  v1::DecompressRequest decompress;
  *decompress.mutable_selector() = KeySelector(keys);
  decompress.set_tier(v1::TIER_DISK);
  v1::DecompressResponse decompressed;
  ASSERT_TRUE(Call(&Stub::Decompress, decompress, decompressed).ok());
  EXPECT_EQ(decompressed.decompressed_chunks(), 3u);
  EXPECT_EQ(decompressed.stored_bytes_after(), 3u * 4096);
  ASSERT_TRUE(Call(&Stub::Decompress, decompress, decompressed).ok());
  EXPECT_EQ(decompressed.not_compressed(), 3u);
  ASSERT_TRUE(Call(&Stub::Stats, v1::StatsRequest(), stats).ok());
  EXPECT_EQ(stats.tiers(1).encoded_chunks(), 0u);

  // The chunks still load: moved up, they come back whole.
  v1::MoveRequest move;
  *move.mutable_selector() = TokenSelector(tokens);
  move.set_target(v1::TIER_HOST);
  v1::MoveResponse moved;
  ASSERT_TRUE(Call(&Stub::Move, move, moved).ok());
  EXPECT_EQ(moved.moved_chunks(), 3u);
}

TEST_F(ControlServiceDiskTest, ListChunksPagesTheDiskTier) {
  const std::vector<ChunkKey> keys = StoreChain(Tokens(16 * 7, 1));
  ASSERT_EQ(*store_->FlushToLowerTiers(), 7u);
  const std::set<ChunkKey> stored(keys.begin(), keys.end());

  // Paged three at a time, every disk chunk comes once, with its size and tokens.
  v1::ListChunksRequest request;
  request.set_tier(v1::TIER_DISK);
  request.set_page_size(3);
  std::vector<ChunkKey> listed;
  std::vector<std::string> tokens;
  v1::ListChunksResponse page;
  do {
    ASSERT_TRUE(Call(&v1::StrataControl::Stub::ListChunks, request, page).ok());
    ASSERT_LE(page.chunks_size(), 3);
    for (const v1::ChunkEntry& entry : page.chunks()) {
      listed.push_back(*FromProto(entry.key()));
      EXPECT_EQ(entry.tier(), v1::TIER_DISK);
      EXPECT_EQ(entry.size_bytes(), 4096u);
      EXPECT_EQ(entry.num_tokens(), 16u);
      EXPECT_FALSE(entry.hard_pinned());
      EXPECT_EQ(entry.leases(), 0u);
    }
    tokens.push_back(page.next_page_token());
    request.set_page_token(page.next_page_token());
  } while (!page.next_page_token().empty());
  EXPECT_EQ(listed.size(), 7u);
  EXPECT_EQ(std::set<ChunkKey>(listed.begin(), listed.end()), stored);
  EXPECT_GE(tokens.size(), 3u);

  // Columnar pages carry the same chunks and tokens.
  request.set_page_token("");
  request.set_columnar(true);
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::ListChunks, request, page).ok());
  EXPECT_EQ(page.chunks_size(), 0);
  ASSERT_EQ(page.columns().tiers_size(), 3);
  EXPECT_EQ(page.columns().tiers(0), v1::TIER_DISK);
  EXPECT_EQ(page.columns().digests().size(), 3u * 16);
  EXPECT_EQ(page.next_page_token(), tokens[0]);
  request.set_columnar(false);

  // A chunk removed between pages is not listed; the listing goes on from where it was.
  request.set_page_token(tokens[0]);
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::ListChunks, request, page).ok());
  ASSERT_EQ(page.chunks_size(), 3);
  const ChunkKey gone = *FromProto(page.chunks(1).key());
  v1::ClearRequest clear;
  *clear.mutable_selector() = KeySelector(std::vector<ChunkKey>{gone});
  clear.set_tier(v1::TIER_DISK);
  v1::ClearResponse cleared;
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Clear, clear, cleared).ok());
  ASSERT_EQ(cleared.removed_chunks(), 1u);
  v1::ListChunksRequest again;
  again.set_tier(v1::TIER_DISK);
  again.set_page_size(3);
  const std::vector<ChunkKey> after_clear = ListAll(again);
  EXPECT_EQ(after_clear.size(), 6u);
  EXPECT_EQ(std::count(after_clear.begin(), after_clear.end(), gone), 0);
  // An old token still resumes (after a key, whether or not it is still there).
  request.set_page_token(tokens[0]);
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::ListChunks, request, page).ok());
  ASSERT_EQ(page.chunks_size(), 3);
  for (const v1::ChunkEntry& entry : page.chunks()) EXPECT_NE(*FromProto(entry.key()), gone);

  // The layout filter.
  again.set_layout_fingerprint(TestLayout().Fingerprint());
  EXPECT_EQ(ListAll(again).size(), 6u);
  again.set_layout_fingerprint(0x1234);
  EXPECT_TRUE(ListAll(again).empty());

  // Tokens of one kind of tier do not page the other; junk is refused.
  for (const std::string& bad : {std::string("h5"), std::string("kzz"), std::string("k0"),
                                 std::string("k") + std::string(64, 'f')}) {
    request.set_page_token(bad);
    EXPECT_EQ(Call(&v1::StrataControl::Stub::ListChunks, request, page).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << bad;
  }
  v1::ListChunksRequest host;
  host.set_page_token(tokens[0]);
  EXPECT_EQ(Call(&v1::StrataControl::Stub::ListChunks, host, page).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ControlServiceDiskTest, WatchEventsTellTheDiskTiersChangesToo) {
  EventStream stream(*stub_, 0);
  ASSERT_TRUE(stream.Next().has_value());
  const std::vector<ChunkKey> keys = StoreChain(Tokens(32, 1));
  v1::MoveRequest move;
  *move.mutable_selector() = KeySelector(std::span(keys).first(1));
  move.set_target(v1::TIER_DISK);
  v1::MoveResponse moved;
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Move, move, moved).ok());
  v1::ClearRequest clear;
  *clear.mutable_selector() = KeySelector(std::span(keys).first(1));
  clear.set_tier(v1::TIER_DISK);
  v1::ClearResponse cleared;
  ASSERT_TRUE(Call(&v1::StrataControl::Stub::Clear, clear, cleared).ok());

  // Stored in the host tier twice; the move: stored on disk, then removed from the host tier;
  // the clear: removed from disk.
  const std::vector<v1::ChunkEvent> events = stream.Events(5);
  ASSERT_EQ(events.size(), 5u);
  const std::pair<v1::Tier, bool> expected[] = {{v1::TIER_HOST, true},
                                                {v1::TIER_HOST, true},
                                                {v1::TIER_DISK, true},
                                                {v1::TIER_HOST, false},
                                                {v1::TIER_DISK, false}};
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].tier(), expected[i].first) << i;
    EXPECT_EQ(events[i].has_stored(), expected[i].second) << i;
  }
  EXPECT_EQ(*FromProto(events[2].stored().key()), keys[0]);
  EXPECT_EQ(events[2].stored().num_tokens(), 16u);
  EXPECT_EQ(*FromProto(events[4].removed().key()), keys[0]);
  EXPECT_EQ(events[4].removed().cause(), v1::ChunkEvent::REMOVAL_CAUSE_REMOVED);
}

TEST_F(ControlServiceDiskTest, TheDiskRecordsTenantsForListingsClearsAndCompress) {
  const std::vector<ChunkKey> alice = StoreChain(Tokens(32, 1), "alice");
  const std::vector<ChunkKey> bob = StoreChain(Tokens(16, 1), "bob");
  ASSERT_EQ(*store_->FlushToLowerTiers(), 3u);     // every chunk gets a disk copy
  ASSERT_EQ(tier_->Remove(alice[0])->chunks, 1u);  // now only on disk
  const auto disk_keys = [&](const std::string& tenant) {
    v1::ListChunksRequest list;
    list.set_tenant(tenant);
    list.set_tier(v1::TIER_DISK);
    v1::ListChunksResponse listed;
    EXPECT_TRUE(Call(&Stub::ListChunks, list, listed).ok());
    std::set<ChunkKey> keys;
    for (const v1::ChunkEntry& entry : listed.chunks()) keys.insert(*FromProto(entry.key()));
    return keys;
  };
  EXPECT_EQ(disk_keys("alice"), std::set<ChunkKey>(alice.begin(), alice.end()));
  EXPECT_EQ(disk_keys("bob"), std::set<ChunkKey>{bob[0]});
  EXPECT_TRUE(disk_keys("carol").empty());

  // Compress and Decompress by tenant: alice's chunks on disk, bob's stay as they are.
  v1::CompressRequest compress;
  compress.set_codec("int8");
  v1::CompressResponse compressed;
  EXPECT_EQ(Call(&Stub::Compress, compress, compressed).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT)
      << "neither a selector nor a tenant";
  compress.set_tenant("alice");
  *compress.mutable_selector() = KeySelector(bob);
  EXPECT_EQ(Call(&Stub::Compress, compress, compressed).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT)
      << "both";
  compress.clear_selector();
  ASSERT_TRUE(Call(&Stub::Compress, compress, compressed).ok());
  EXPECT_EQ(compressed.unknown_layout_chunks(), 2u) << "no engine told the disk their layout";
  *compress.mutable_selector()->mutable_layout() = ToProto(TestLayout());  // a layout alone
  ASSERT_TRUE(Call(&Stub::Compress, compress, compressed).ok());
  EXPECT_EQ(compressed.compressed_chunks(), 2u);
  const absl::StatusOr<storage::LowerTier::ListPage> on_disk =
      store_->ListBelowHost(storage::Tier::kDisk, {});
  ASSERT_TRUE(on_disk.ok()) << on_disk.status();
  EXPECT_EQ(on_disk->chunks.size(), 3u);
  for (const storage::LowerTier::ListedChunk& chunk : on_disk->chunks) {
    EXPECT_EQ(chunk.info.codec.has_value(), chunk.key != bob[0]);
    EXPECT_EQ(chunk.info.tenant, chunk.key == bob[0] ? "bob" : "alice") << "kept as recoded";
  }
  v1::DecompressRequest decompress;
  decompress.set_tenant("alice");
  *decompress.mutable_selector()->mutable_layout() = ToProto(TestLayout());
  v1::DecompressResponse decompressed;
  ASSERT_TRUE(Call(&Stub::Decompress, decompress, decompressed).ok());
  EXPECT_EQ(decompressed.decompressed_chunks(), 2u);
  // The tenant's host chunks, in place, and back.
  compress.set_tier(v1::TIER_HOST);
  ASSERT_TRUE(Call(&Stub::Compress, compress, compressed).ok());
  EXPECT_GT(compressed.compressed_chunks(), 0u);
  decompress.set_tier(v1::TIER_HOST);
  ASSERT_TRUE(Call(&Stub::Decompress, decompress, decompressed).ok());
  EXPECT_EQ(decompressed.decompressed_chunks(), compressed.compressed_chunks());

  // A chunk promoted from disk keeps its tenant in the host tier.
  v1::MoveRequest move;
  *move.mutable_selector() = TokenSelector(Tokens(16, 1));
  move.mutable_selector()->set_tenant_salt("alice");
  move.set_target(v1::TIER_HOST);
  v1::MoveResponse moved;
  ASSERT_TRUE(Call(&Stub::Move, move, moved).ok());
  EXPECT_EQ(moved.moved_chunks(), 1u);
  EXPECT_EQ(tier_->TenantOf(alice[0]), "alice");
  move.set_target(v1::TIER_DISK);  // and back, from the host tier under that tenant
  ASSERT_TRUE(Call(&Stub::Move, move, moved).ok());
  EXPECT_FALSE(tier_->Contains(alice[0]));

  // Cleared from the disk by tenant: alice's chunk only on disk goes, and her host chunk's copy.
  v1::ClearRequest clear;
  clear.set_tenant("alice");
  clear.set_tier(v1::TIER_DISK);
  v1::ClearResponse response;
  ASSERT_TRUE(Call(&Stub::Clear, clear, response).ok());
  EXPECT_EQ(response.removed_chunks(), 2u);
  EXPECT_FALSE(OnDisk(alice[0]));
  EXPECT_FALSE(OnDisk(alice[1]));
  EXPECT_TRUE(tier_->Contains(alice[1]));
  // Every tier: the host chunk goes too; bob's chunks stay everywhere.
  clear.set_tier(v1::TIER_UNSPECIFIED);
  ASSERT_TRUE(Call(&Stub::Clear, clear, response).ok());
  EXPECT_EQ(response.removed_chunks(), 1u);
  EXPECT_FALSE(tier_->Contains(alice[1]));
  EXPECT_TRUE(tier_->Contains(bob[0]));
  EXPECT_TRUE(OnDisk(bob[0]));
  // No remote tier here.
  clear.set_tier(v1::TIER_REMOTE);
  EXPECT_EQ(Call(&Stub::Clear, clear, response).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace strata::daemon
