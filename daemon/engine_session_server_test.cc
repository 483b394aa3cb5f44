#include "daemon/engine_session_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <thread>

#include "core/fmt_absl.h"
#include "core/frame_io.h"
#include "core/key_hasher.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "storage/codec/codec_registry.h"
#include "storage/device/device_pools.h"
#include "storage/device/host_runtime.h"
#include "storage/device/testing/forked_child.h"
#include "storage/host/payload_view.h"
#include "storage/io/testing/io_test_util.h"
#include "storage/tiered/tiered_store.h"
#include "strata/v1/engine.pb.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/test_layout.h"

namespace strata::daemon {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

KvLayout TestLayout() { return test_support::SmallLayout(); }

using test_support::RawEngineClient;

class EngineSessionServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("strata-sessions-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    storage::HostTierOptions options;
    options.capacity_bytes = 64 * 4096;
    options.page_bytes = 4096;
    options.hard_pin_quota_bytes = 16 * 4096;
    options.clock = &clock_;
    store_ = *storage::TieredStore::Create({.host = options});
    tier_ = &store_->host();
    server_ = *EngineSessionServer::Create(
        {.socket_path = (dir_ / "engine.sock").string(), .store = store_.get()});
    server_->Start();
    hasher_.emplace(*KeyHasher::Create(TestLayout(), {}));
  }
  void TearDown() override {
    server_->Stop();
    server_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::vector<ChunkKey> Keys(size_t num_chunks, uint32_t first_token = 0) {
    std::vector<uint32_t> tokens(num_chunks * 16);
    std::iota(tokens.begin(), tokens.end(), first_token);
    return hasher_->PrefixKeys(tokens, {});
  }

  // Stores `keys` through the protocol, filling chunk i with byte value fill + i.
  static void Store(RawEngineClient& client, const std::vector<ChunkKey>& keys, uint8_t fill) {
    absl::StatusOr<std::vector<uint64_t>> handles = client.Store(keys, 16, fill);
    ASSERT_TRUE(handles.ok()) << handles.status();
    ASSERT_EQ(handles->size(), keys.size());
  }

  ManualClock clock_;
  std::filesystem::path dir_;
  std::unique_ptr<storage::TieredStore> store_;
  storage::HostTier* tier_ = nullptr;  // the store's
  std::unique_ptr<EngineSessionServer> server_;
  std::optional<KeyHasher> hasher_;
};

TEST_F(EngineSessionServerTest, StoreThenLoadThroughTheSharedArena) {
  RawEngineClient writer(server_->socket_path());
  ASSERT_TRUE(writer.connected());
  absl::StatusOr<v1::EngineResponse> hello = writer.Handshake(TestLayout());
  ASSERT_TRUE(hello.ok()) << hello.status();
  ASSERT_EQ(hello->status().code(), 0) << hello->status().message();
  EXPECT_EQ(hello->handshake().layout_fingerprint(), TestLayout().Fingerprint());
  ASSERT_NE(writer.arena(), nullptr) << "the arena fd must come with the handshake";
  const std::vector<ChunkKey> keys = Keys(3);
  Store(writer, keys, 0x40);

  // Another engine process would do the same: a second session sees the same chunks.
  RawEngineClient reader(server_->socket_path());
  ASSERT_TRUE(reader.Handshake(TestLayout()).ok());
  v1::EngineRequest lookup = test_support::LookupRequest(Keys(5));
  absl::StatusOr<v1::EngineResponse> found = reader.Call(lookup);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->lookup().hit_chunks(), 3u);

  v1::EngineRequest load = test_support::PrepareLoadRequest(keys);
  absl::StatusOr<v1::EngineResponse> leased = reader.Call(load);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->prepare_load().chunks_size(), 3);
  v1::EngineRequest release;
  for (int i = 0; i < 3; ++i) {
    const v1::LoadPlacement& chunk = leased->prepare_load().chunks(i);
    ASSERT_EQ(chunk.status().code(), 0) << chunk.status().message();
    EXPECT_EQ(chunk.size_bytes(), TestLayout().chunk_bytes(16));
    for (const v1::Extent& extent : chunk.extents()) {
      for (uint64_t b = 0; b < extent.length(); ++b) {
        ASSERT_EQ(static_cast<uint8_t>(reader.arena()[extent.offset() + b]), 0x40 + i);
      }
    }
    release.mutable_release()->add_handles(chunk.handle());
  }
  EXPECT_EQ(tier_->Stats().active_leases, 3u);
  absl::StatusOr<v1::EngineResponse> released = reader.Call(release);
  ASSERT_TRUE(released.ok());
  for (const v1::Status& s : released->handles().statuses()) EXPECT_EQ(s.code(), 0);
  EXPECT_EQ(tier_->Stats().active_leases, 0u);
}

// Disaggregated prefill: the handshake names the node, and a lookup naming the node that
// produced the KV is refused (NOT_FOUND) unless that node is this one or an admitted peer.
TEST_F(EngineSessionServerTest, TheNodeIdentityAndTheSourceNodeOfALookup) {
  RawEngineClient plain(server_->socket_path());
  absl::StatusOr<v1::EngineResponse> hello = plain.Handshake(TestLayout());
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->handshake().node_id(), "") << "no remote tier";
  v1::EngineRequest named = test_support::LookupRequest(Keys(2));
  named.mutable_lookup()->set_source_node("prefill-a");
  absl::StatusOr<v1::EngineResponse> refused = plain.Call(named);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status().code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_THAT(refused->status().message(), HasSubstr("no remote tier"));

  server_->Stop();
  std::vector<std::string> asked;
  server_ =
      *EngineSessionServer::Create({.socket_path = (dir_ / "engine2.sock").string(),
                                    .store = store_.get(),
                                    .node = {.node_id = "decode-b",
                                             .remote_address = "10.0.0.2:7100",
                                             .is_admitted_peer = [&asked](std::string_view name) {
                                               asked.emplace_back(name);
                                               return name == "prefill-a";
                                             }}});
  server_->Start();
  RawEngineClient engine(server_->socket_path());
  hello = engine.Handshake(TestLayout());
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->handshake().node_id(), "decode-b");
  EXPECT_EQ(hello->handshake().remote_address(), "10.0.0.2:7100");
  Store(engine, Keys(2), 0x10);
  for (const std::string source : {"prefill-a", "decode-b", ""}) {
    v1::EngineRequest lookup = test_support::LookupRequest(Keys(3));
    lookup.mutable_lookup()->set_source_node(source);
    absl::StatusOr<v1::EngineResponse> found = engine.Call(lookup);
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(found->status().code(), 0) << source << ": " << found->status().message();
    EXPECT_EQ(found->lookup().hit_chunks(), 2u) << source;
  }
  named.mutable_lookup()->set_source_node("stranger");
  refused = engine.Call(named);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status().code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_THAT(refused->status().message(), HasSubstr("'stranger', which is not an admitted peer"));
  EXPECT_EQ(asked, (std::vector<std::string>{"prefill-a", "stranger"}))
      << "the node itself and an empty source need no peer";
  // The session goes on serving after the refusal.
  EXPECT_EQ(engine.Call(test_support::LookupRequest(Keys(3)))->lookup().hit_chunks(), 2u);
}

// StoreItem.hold_ms soft-pins a chunk once committed (and one already present); an aborted
// reservation holds nothing.
TEST_F(EngineSessionServerTest, AHeldChunkIsSoftPinnedOnceCommitted) {
  RawEngineClient engine(server_->socket_path());
  ASSERT_TRUE(engine.Handshake(TestLayout()).ok());
  const uint64_t chunk_bytes = TestLayout().chunk_bytes(16);
  ASSERT_TRUE(engine.Store(Keys(2), 16, 0x20, /*commit=*/true, "", {}, 60'000).ok());
  EXPECT_EQ(tier_->Stats().soft_pinned_bytes, 2 * chunk_bytes);
  // Uncommitted, then aborted: no hold.
  const std::vector<ChunkKey> others = Keys(2, 5000);
  absl::StatusOr<std::vector<uint64_t>> open =
      engine.Store(others, 16, 0x30, /*commit=*/false, "", {}, 60'000);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(tier_->Stats().soft_pinned_bytes, 2 * chunk_bytes) << "not committed yet";
  v1::EngineRequest abort;
  for (uint64_t handle : *open) abort.mutable_abort()->add_handles(handle);
  ASSERT_TRUE(engine.Call(abort).ok());
  EXPECT_EQ(tier_->Stats().soft_pinned_bytes, 2 * chunk_bytes);
  // Already present (stored without a hold): storing it again with one holds it.
  ASSERT_TRUE(engine.Store(others, 16, 0x30).ok());
  EXPECT_EQ(tier_->Stats().soft_pinned_bytes, 2 * chunk_bytes);
  ASSERT_TRUE(engine.Store(others, 16, 0x30, /*commit=*/true, "", {}, 60'000).ok());
  EXPECT_EQ(tier_->Stats().soft_pinned_bytes, 4 * chunk_bytes);
  // Holds end: the tier's clock passes them.
  clock_.Advance(std::chrono::seconds(61));
  EXPECT_EQ(tier_->Stats().soft_pinned_bytes, 0u);
}

TEST_F(EngineSessionServerTest, ATenantAboveItsQuotaLosesItsOwnChunks) {
  // A tier of 8 one-page chunks where tenant "a" may keep 2 once it is full.
  std::unique_ptr<storage::TieredStore> store =
      *storage::TieredStore::Create({.host = {.capacity_bytes = 8 * 4096,
                                              .page_bytes = 4096,
                                              .policy = "lru",
                                              .tenant_quotas = {{"a", 2 * 4096}}}});
  storage::HostTier* tier = &store->host();
  std::unique_ptr<EngineSessionServer> server = *EngineSessionServer::Create(
      {.socket_path = (dir_ / "quota.sock").string(), .store = store.get()});
  server->Start();
  RawEngineClient client(server->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> b_keys = Keys(4, 0);
  const std::vector<ChunkKey> a_keys = Keys(6, 1000);
  ASSERT_TRUE(client.Store(b_keys, 16, 1, true, "b").ok());
  for (const ChunkKey& key : a_keys) ASSERT_TRUE(client.Store({key}, 16, 2, true, "a").ok());
  // The tier filled at a's 4th chunk; a's 5th and 6th each evicted a's oldest, not b's.
  for (const ChunkKey& key : b_keys) EXPECT_TRUE(tier->Contains(key));
  EXPECT_FALSE(tier->Contains(a_keys[0]));
  EXPECT_FALSE(tier->Contains(a_keys[1]));
  for (size_t i = 2; i < a_keys.size(); ++i) EXPECT_TRUE(tier->Contains(a_keys[i])) << i;
  server->Stop();
}

// A host tier of 4 one-page chunks that demotes what it evicts to a disk tier, through a demoter
// that stages up to `demotion_queue_bytes` (0: synchronous demotion).
std::unique_ptr<storage::TieredStore> HostOverDisk(const std::string& directory,
                                                   uint64_t demotion_queue_bytes) {
  return *storage::TieredStore::Create(
      {.host = {.capacity_bytes = 4 * 4096, .page_bytes = 4096, .policy = "lru"},
       .disk =
           storage::TieredDiskOptions{
               .directory = directory, .capacity_bytes = 1 << 20, .segment_bytes = 64 << 10},
       .movement = {.demotion_queue_bytes = demotion_queue_bytes}});
}

storage::LowerTierStats DiskStats(const storage::TieredStore& store) {
  return store.Stats().lower.at(0);
}

void EvictedChunksAreFoundAndLoadedBack(const std::filesystem::path& dir,
                                        uint64_t demotion_queue_bytes,
                                        const std::vector<ChunkKey>& keys) {
  ASSERT_EQ(keys.size(), 6u);
  std::filesystem::create_directories(dir);
  storage::testing::ScratchDir scratch(dir.string());
  // A chunk evicted by a promotion is on disk (synchronous demotion) or staged in the demoter
  // when the promotion returns, so the same PrepareLoad finds it there.
  std::unique_ptr<storage::TieredStore> store = HostOverDisk(scratch.path(), demotion_queue_bytes);
  storage::HostTier* tier = &store->host();
  LookupAccounting lookups;
  std::unique_ptr<EngineSessionServer> server = *EngineSessionServer::Create(
      {.socket_path = (dir / "disk.sock").string(), .store = store.get(), .lookups = &lookups});
  server->Start();
  RawEngineClient client(server->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(client.Store({keys[i]}, 16, static_cast<uint8_t>(0x10 * (i + 1))).ok());
  }
  EXPECT_FALSE(tier->Contains(keys[0]));  // evicted to disk
  if (demotion_queue_bytes == 0) {
    EXPECT_EQ(store->Stats().movement.demoted, 2u);
  }

  // The engine's prompt ends half-way into the last chunk: 5 x 16 + 8 tokens.
  v1::EngineRequest lookup = test_support::LookupRequest(keys);
  lookup.mutable_lookup()->set_tenant("tenant-a");
  lookup.mutable_lookup()->set_tokens(88);
  absl::StatusOr<v1::EngineResponse> found = client.Call(lookup);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->lookup().hit_chunks(), 6u) << "the prefix goes on from disk to the host tier";
  // Chunks 0 and 1 count under the disk tier (staged ones too: on their way there), the rest
  // under the host tier, the partial last chunk by its 8 tokens.
  const LookupTally engines = lookups.Total(LookupSource::kEngine);
  EXPECT_EQ(engines.lookups, 1u);
  EXPECT_EQ(engines.hit_tokens[static_cast<size_t>(storage::Tier::kDisk)], 32u);
  EXPECT_EQ(engines.hit_tokens[static_cast<size_t>(storage::Tier::kHost)], 56u);
  EXPECT_EQ(engines.miss_tokens, 0u);
  ASSERT_EQ(lookups.ByTenant(LookupSource::kEngine).size(), 1u);
  EXPECT_EQ(lookups.ByTenant(LookupSource::kEngine)[0].first, "tenant-a");
  EXPECT_EQ(lookups.Total(LookupSource::kControl).lookups, 0u);
  // A token count past what the chain covers is capped at its full chunks.
  lookup.mutable_lookup()->set_tokens(100000);
  ASSERT_TRUE(client.Call(lookup).ok());
  EXPECT_EQ(lookups.Total(LookupSource::kEngine).hit_tokens_total(), 88u + 96u);
  EXPECT_EQ(lookups.Total(LookupSource::kEngine).miss_tokens, 0u);

  // Loading the first three promotes chunks 0 and 1, whose room evicts 2 and 3 (LRU) to disk,
  // so 2 comes back from disk (or from its staging buffer) too: every byte as stored.
  v1::EngineRequest load = test_support::PrepareLoadRequest(std::span(keys).first(3));
  absl::StatusOr<v1::EngineResponse> leased = client.Call(load);
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->prepare_load().chunks_size(), 3);
  for (int i = 0; i < 3; ++i) {
    const v1::LoadPlacement& chunk = leased->prepare_load().chunks(i);
    ASSERT_EQ(chunk.status().code(), 0) << i << ": " << chunk.status().message();
    for (const v1::Extent& extent : chunk.extents()) {
      for (uint64_t b = 0; b < extent.length(); ++b) {
        ASSERT_EQ(static_cast<uint8_t>(client.arena()[extent.offset() + b]), 0x10 * (i + 1));
      }
    }
  }
  if (demotion_queue_bytes == 0) {
    EXPECT_EQ(DiskStats(*store).reads, 3u);
  } else {
    EXPECT_LE(DiskStats(*store).reads, 3u);  // staged chunks are copied from memory
  }
  EXPECT_EQ(store->Stats().movement.async_loads, 1u) << "the load went on in the store";
  EXPECT_EQ(store->Stats().movement.load_promoted_from[static_cast<size_t>(storage::Tier::kDisk)],
            3u);
  server->Stop();
  store->Flush();
  EXPECT_EQ(store->Stats().movement.demotion_failures, 0u);
}

TEST_F(EngineSessionServerTest, ChunksEvictedToDiskAreFoundAndLoadedBack) {
  EvictedChunksAreFoundAndLoadedBack(dir_, 0, Keys(6));
}

// The mover's queue on: chunks waiting for their disk write are still found and loaded.
TEST_F(EngineSessionServerTest, ChunksQueuedForDemotionAreFoundAndLoadedBack) {
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE(round);
    EvictedChunksAreFoundAndLoadedBack(dir_ / std::to_string(round), 256ull << 20, Keys(6));
    if (HasFatalFailure()) return;
  }
}

TEST_F(EngineSessionServerTest, PrefetchPromotesInTheBackgroundSoTheLoadReadsNoDisk) {
  storage::testing::ScratchDir scratch(dir_.string());
  std::unique_ptr<storage::TieredStore> store = HostOverDisk(scratch.path(), 0);
  storage::HostTier* tier = &store->host();
  std::unique_ptr<EngineSessionServer> server = *EngineSessionServer::Create(
      {.socket_path = (dir_ / "prefetch.sock").string(), .store = store.get()});
  server->Start();
  RawEngineClient client(server->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> keys = Keys(6);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(client.Store({keys[i]}, 16, static_cast<uint8_t>(0x10 * (i + 1))).ok());
  }
  ASSERT_FALSE(tier->Contains(keys[0]));  // chunks 0 and 1 are on disk only
  ASSERT_FALSE(tier->Contains(keys[1]));
  ASSERT_EQ(store->LocatePrefix(std::span(keys).first(1)),
            std::vector<storage::Tier>{storage::Tier::kDisk});
  EXPECT_EQ(DiskStats(*store).reads, 0u);

  absl::StatusOr<v1::EngineResponse> prefetched =
      client.Call(test_support::PrefetchRequest(std::span(keys).first(3)));
  ASSERT_TRUE(prefetched.ok()) << prefetched.status();
  ASSERT_EQ(prefetched->status().code(), 0) << prefetched->status().message();
  EXPECT_EQ(prefetched->prefetch().queued_chunks(), 2u) << "chunk 2 is in the host tier";

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(tier->Contains(keys[0]) && tier->Contains(keys[1])) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_TRUE(tier->Contains(keys[0]) && tier->Contains(keys[1])) << "prefetch never landed";
  store->Flush();
  EXPECT_EQ(store->Stats().movement.prefetch_promoted, 2u);
  const uint64_t reads = DiskStats(*store).reads;
  EXPECT_EQ(reads, 2u);

  // The load finds both chunks in the host tier: no disk read, every byte as stored.
  absl::StatusOr<v1::EngineResponse> leased =
      client.Call(test_support::PrepareLoadRequest(std::span(keys).first(2)));
  ASSERT_TRUE(leased.ok());
  ASSERT_EQ(leased->prepare_load().chunks_size(), 2);
  for (int i = 0; i < 2; ++i) {
    const v1::LoadPlacement& chunk = leased->prepare_load().chunks(i);
    ASSERT_EQ(chunk.status().code(), 0) << i << ": " << chunk.status().message();
    for (const v1::Extent& extent : chunk.extents()) {
      for (uint64_t b = 0; b < extent.length(); ++b) {
        ASSERT_EQ(static_cast<uint8_t>(client.arena()[extent.offset() + b]), 0x10 * (i + 1));
      }
    }
  }
  EXPECT_EQ(DiskStats(*store).reads, reads);
  EXPECT_EQ(store->Stats().movement.async_loads, 0u) << "host hits answer at once";

  // A chain of another layout is refused; the session goes on.
  KvLayout other = TestLayout();
  other.model_id = "other-model";
  const std::vector<uint32_t> tokens(16, 7);
  const std::vector<ChunkKey> foreign = KeyHasher::Create(other, {})->PrefixKeys(tokens, {});
  absl::StatusOr<v1::EngineResponse> refused = client.Call(test_support::PrefetchRequest(foreign));
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(refused->has_prefetch());
  ASSERT_TRUE(client.Call(test_support::LookupRequest(keys)).ok());
  server->Stop();
}

// A load of disk chunks goes on in the store; the session's next request, sent meanwhile, is
// answered after it (responses stay in request order), and another session is served as usual.
TEST_F(EngineSessionServerTest, ADeferredLoadKeepsItsSessionsOrderAndFreesItsLeasesOnClose) {
  storage::testing::ScratchDir scratch(dir_.string());
  std::unique_ptr<storage::TieredStore> store = HostOverDisk(scratch.path(), 0);
  std::unique_ptr<EngineSessionServer> server = *EngineSessionServer::Create(
      {.socket_path = (dir_ / "deferred.sock").string(), .store = store.get()});
  server->Start();
  RawEngineClient a(server->socket_path());
  RawEngineClient b(server->socket_path());
  ASSERT_TRUE(a.Handshake(TestLayout()).ok());
  ASSERT_TRUE(b.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> keys = Keys(6);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(a.Store({keys[i]}, 16, static_cast<uint8_t>(0x10 * (i + 1))).ok());
  }
  ASSERT_FALSE(store->host().Contains(keys[0]));  // 0 and 1 are on disk only

  for (int round = 0; round < 10; ++round) {
    SCOPED_TRACE(round);
    absl::StatusOr<uint64_t> load =
        a.Send(test_support::PrepareLoadRequest(std::span(keys).first(2)));
    absl::StatusOr<uint64_t> lookup = a.Send(test_support::LookupRequest(keys));
    ASSERT_TRUE(load.ok() && lookup.ok());
    absl::StatusOr<v1::EngineResponse> found = b.Call(test_support::LookupRequest(keys));
    ASSERT_TRUE(found.ok());
    EXPECT_EQ(found->status().code(), 0);
    // 0 and 1 are on disk throughout; 2 and 3, evicted by their promotion and written on the
    // evicting thread (synchronous demotion), are in neither index for the write's duration.
    EXPECT_GE(found->lookup().hit_chunks(), 2u);

    absl::StatusOr<v1::EngineResponse> leased = a.Receive();
    ASSERT_TRUE(leased.ok()) << leased.status();
    EXPECT_EQ(leased->request_id(), *load);
    ASSERT_EQ(leased->prepare_load().chunks_size(), 2);
    v1::EngineRequest release;
    for (int i = 0; i < 2; ++i) {
      const v1::LoadPlacement& chunk = leased->prepare_load().chunks(i);
      ASSERT_EQ(chunk.status().code(), 0) << chunk.status().message();
      for (const v1::Extent& extent : chunk.extents()) {
        for (uint64_t byte = 0; byte < extent.length(); ++byte) {
          ASSERT_EQ(static_cast<uint8_t>(a.arena()[extent.offset() + byte]), 0x10 * (i + 1));
        }
      }
      release.mutable_release()->add_handles(chunk.handle());
    }
    absl::StatusOr<v1::EngineResponse> after = a.Receive();
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->request_id(), *lookup);
    EXPECT_TRUE(after->has_lookup());
    ASSERT_TRUE(a.Call(release).ok());
    // Back to disk only, for the next round.
    absl::StatusOr<storage::MoveResult> moved =
        store->Move(std::span(keys).first(2), storage::Tier::kDisk, nullptr);
    ASSERT_TRUE(moved.ok()) << moved.status();
    ASSERT_FALSE(store->host().Contains(keys[0]));
  }
  EXPECT_EQ(store->Stats().movement.async_loads, 10u);

  // A session that ends while its load is deferred: its leases go with it.
  {
    RawEngineClient gone(server->socket_path());
    ASSERT_TRUE(gone.Handshake(TestLayout()).ok());
    ASSERT_TRUE(gone.Send(test_support::PrepareLoadRequest(std::span(keys).first(2))).ok());
  }
  store->Flush();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (store->host().Stats().active_leases != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  EXPECT_EQ(store->host().Stats().active_leases, 0u);
  ASSERT_TRUE(b.Call(test_support::LookupRequest(keys)).ok()) << "the server goes on";
  server->Stop();
}

TEST_F(EngineSessionServerTest, PrefetchWithoutADiskTierQueuesNothing) {
  RawEngineClient client(server_->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> keys = Keys(2);
  absl::StatusOr<v1::EngineResponse> prefetched = client.Call(test_support::PrefetchRequest(keys));
  ASSERT_TRUE(prefetched.ok());
  EXPECT_EQ(prefetched->status().code(), 0);
  ASSERT_TRUE(prefetched->has_prefetch());
  EXPECT_EQ(prefetched->prefetch().queued_chunks(), 0u);
}

TEST_F(EngineSessionServerTest, LoadStopsAtTheFirstMissingChunk) {
  RawEngineClient client(server_->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> keys = Keys(3);
  Store(client, {keys[0], keys[2]}, 1);  // keys[1] missing
  v1::EngineRequest load = test_support::PrepareLoadRequest(keys);
  absl::StatusOr<v1::EngineResponse> leased = client.Call(load);
  ASSERT_TRUE(leased.ok());
  EXPECT_EQ(leased->prepare_load().chunks(0).status().code(), 0);
  EXPECT_EQ(leased->prepare_load().chunks(1).status().code(), int(absl::StatusCode::kAborted));
  EXPECT_EQ(leased->prepare_load().chunks(2).status().code(), int(absl::StatusCode::kAborted));
  EXPECT_EQ(tier_->Stats().active_leases, 1u);
}

// A corrupt chunk: the daemon's own check on lease drops it (kDataLoss), unless the connector
// says it checks the bytes as it copies; then the lease carries the committed checksum, which
// the corrupt bytes will not match on the connector's side.
TEST_F(EngineSessionServerTest, LeasesSkipTheDaemonsCheckWhenTheConnectorVerifies) {
  RawEngineClient client(server_->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> keys = Keys(1);
  Store(client, keys, 9);
  v1::EngineRequest load = test_support::PrepareLoadRequest(keys);
  load.mutable_prepare_load()->set_connector_verifies(true);
  absl::StatusOr<v1::EngineResponse> leased = client.Call(load);
  ASSERT_TRUE(leased.ok());
  const v1::LoadPlacement& placement = leased->prepare_load().chunks(0);
  ASSERT_EQ(placement.status().code(), 0);
  const uint64_t committed = placement.checksum();
  client.arena()[placement.extents(0).offset()] ^= std::byte{1};

  load.mutable_prepare_load()->set_connector_verifies(true);
  leased = client.Call(load);
  ASSERT_TRUE(leased.ok());
  EXPECT_EQ(leased->prepare_load().chunks(0).status().code(), 0);
  EXPECT_EQ(leased->prepare_load().chunks(0).checksum(), committed);
  EXPECT_EQ(tier_->Stats().checksum_failures, 0u);

  load.mutable_prepare_load()->set_connector_verifies(false);
  leased = client.Call(load);
  ASSERT_TRUE(leased.ok());
  EXPECT_EQ(leased->prepare_load().chunks(0).status().code(), int(absl::StatusCode::kDataLoss));
  EXPECT_EQ(tier_->Stats().checksum_failures, 1u);
}

// A chunk held compressed is placed as its frame only for a load that names its codec (ids that
// name no codec are ignored); any other load gets it decoded back in place first.
TEST_F(EngineSessionServerTest, ACompressedChunkIsPlacedAsItsFrameOnlyForALoadThatDecodesIt) {
  RawEngineClient client(server_->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> keys = Keys(1);
  Store(client, keys, 9);
  const uint64_t chunk_bytes = TestLayout().chunk_bytes(16);
  absl::StatusOr<storage::RecodeTotals> compressed =
      store_->Recode(keys, storage::Tier::kHost, {.codec = *storage::CodecRegistry::Find("int8")});
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  ASSERT_EQ(compressed->recoded, 1u);

  v1::EngineRequest load = test_support::PrepareLoadRequest(keys);
  for (const uint32_t codec : {0u, 2u, 64u, 1000u}) {
    load.mutable_prepare_load()->add_decoded_codecs(codec);
  }
  absl::StatusOr<v1::EngineResponse> leased = client.Call(load);
  ASSERT_TRUE(leased.ok());
  EXPECT_EQ(leased->prepare_load().chunks(0).status().code(), 0);
  EXPECT_FALSE(leased->prepare_load().chunks(0).has_encoding()) << "kivi4 only: decoded first";
  EXPECT_EQ(leased->prepare_load().chunks(0).size_bytes(), chunk_bytes);
  const uint64_t decoded_checksum = leased->prepare_load().chunks(0).checksum();
  EXPECT_EQ(store_->Stats().movement.load_decoded, 1u);
  v1::EngineRequest release;
  release.mutable_release()->add_handles(leased->prepare_load().chunks(0).handle());
  ASSERT_TRUE(client.Call(release).ok());

  compressed =
      store_->Recode(keys, storage::Tier::kHost, {.codec = *storage::CodecRegistry::Find("int8")});
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  ASSERT_EQ(compressed->recoded, 1u);
  load.mutable_prepare_load()->add_decoded_codecs(static_cast<uint32_t>(storage::CodecId::kInt8));
  leased = client.Call(load);
  ASSERT_TRUE(leased.ok());
  const v1::LoadPlacement& frame = leased->prepare_load().chunks(0);
  ASSERT_EQ(frame.status().code(), 0);
  ASSERT_TRUE(frame.has_encoding());
  EXPECT_EQ(frame.encoding().codec(), static_cast<uint32_t>(storage::CodecId::kInt8));
  EXPECT_EQ(frame.encoding().decoded_bytes(), chunk_bytes);
  EXPECT_EQ(frame.encoding().decoded_checksum(), decoded_checksum)
      << "a quantizer re-encodes its own decode exactly";
  EXPECT_LT(frame.size_bytes(), chunk_bytes);
  std::vector<std::byte> bytes;
  for (const v1::Extent& extent : frame.extents()) {
    bytes.insert(bytes.end(), client.arena() + extent.offset(),
                 client.arena() + extent.offset() + extent.length());
  }
  EXPECT_EQ(bytes.size(), frame.size_bytes());
  EXPECT_EQ(storage::ChecksumBytes(bytes), frame.checksum()) << "the checksum is the frame's";
  EXPECT_EQ(store_->Stats().movement.load_encoded, 1u);
  EXPECT_EQ(store_->Stats().movement.load_decoded, 1u);
  EXPECT_TRUE(tier_->HoldsEncoded(keys[0]));
}

// A commit may carry the writer's checksums (one per handle, or none): they become the chunks'
// checksums, so a wrong one fails the daemon's check on lease instead of passing.
TEST_F(EngineSessionServerTest, CommitRecordsTheWritersChecksums) {
  RawEngineClient client(server_->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> keys = Keys(2);
  absl::StatusOr<std::vector<uint64_t>> handles = client.Store(keys, 16, 0x21, /*commit=*/false);
  ASSERT_TRUE(handles.ok()) << handles.status();
  ASSERT_EQ(handles->size(), 2u);
  const uint64_t right =
      storage::ChecksumBytes(std::vector<std::byte>(TestLayout().chunk_bytes(16), std::byte{0x21}));
  v1::EngineRequest commit;
  for (uint64_t handle : *handles) commit.mutable_commit()->add_handles(handle);
  commit.mutable_commit()->add_checksums(right);
  absl::StatusOr<v1::EngineResponse> r = client.Call(commit);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kInvalidArgument)) << "one for two";

  commit.mutable_commit()->add_checksums(right);  // chunk 1 holds 0x22 bytes: not its checksum
  r = client.Call(commit);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status().code(), 0) << r->status().message();
  EXPECT_EQ(r->handles().statuses(0).code(), 0);
  EXPECT_EQ(r->handles().statuses(1).code(), 0);

  absl::StatusOr<v1::EngineResponse> leased = client.Call(test_support::PrepareLoadRequest(keys));
  ASSERT_TRUE(leased.ok());
  EXPECT_EQ(leased->prepare_load().chunks(0).status().code(), 0);
  EXPECT_EQ(leased->prepare_load().chunks(0).checksum(), right);
  EXPECT_EQ(leased->prepare_load().chunks(1).status().code(), int(absl::StatusCode::kDataLoss));
}

TEST_F(EngineSessionServerTest, ExpiredLeaseReleasesAsAborted) {
  RawEngineClient client(server_->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> keys = Keys(1);
  Store(client, keys, 7);
  v1::EngineRequest load = test_support::PrepareLoadRequest(keys, /*lease_ms=*/100);
  absl::StatusOr<v1::EngineResponse> leased = client.Call(load);
  ASSERT_TRUE(leased.ok());
  clock_.Advance(milliseconds(101));
  v1::EngineRequest release;
  release.mutable_release()->add_handles(leased->prepare_load().chunks(0).handle());
  absl::StatusOr<v1::EngineResponse> released = client.Call(release);
  ASSERT_TRUE(released.ok());
  EXPECT_EQ(released->handles().statuses(0).code(), int(absl::StatusCode::kAborted));
}

TEST_F(EngineSessionServerTest, ClosingASessionReleasesEverythingItHeld) {
  const storage::HostTierStats baseline = tier_->Stats();
  {
    RawEngineClient client(server_->socket_path());
    ASSERT_TRUE(client.Handshake(TestLayout()).ok());
    const std::vector<ChunkKey> committed = Keys(2);
    Store(client, committed, 3);
    v1::EngineRequest load = test_support::PrepareLoadRequest(committed);
    ASSERT_TRUE(client.Call(load).ok());
    v1::EngineRequest store;  // left reserved, never committed
    for (const ChunkKey& key : Keys(2, 1000)) {
      v1::StoreItem* item = store.mutable_prepare_store()->add_items();
      *item->mutable_key() = ToProto(key);
      item->set_num_tokens(16);
    }
    ASSERT_TRUE(client.Call(store).ok());
    const storage::HostTierStats busy = tier_->Stats();
    EXPECT_EQ(busy.active_leases, 2u);
    EXPECT_EQ(busy.reservations, 2u);
  }
  // The server notices the close asynchronously.
  for (int i = 0;
       i < 200 && (tier_->Stats().reservations != 0 || tier_->Stats().active_leases != 0); ++i) {
    ::usleep(5000);
  }
  const storage::HostTierStats after = tier_->Stats();
  EXPECT_EQ(after.active_leases, 0u);
  EXPECT_EQ(after.reservations, 0u);
  EXPECT_EQ(after.reserved_bytes, baseline.reserved_bytes);
  EXPECT_EQ(after.chunks, 2u);  // committed chunks stay cached
  EXPECT_TRUE(tier_->CheckConsistency().ok());
}

TEST_F(EngineSessionServerTest, BadRequestsGetClearStatusesAndTheSessionSurvives) {
  RawEngineClient client(server_->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  KvLayout other = TestLayout();
  other.num_layers = 3;
  const ChunkKey foreign =
      KeyHasher::Create(other, {})->PrefixKeys(std::vector<uint32_t>(16, 1), {})[0];

  v1::EngineRequest lookup = test_support::LookupRequest({&foreign, 1});
  absl::StatusOr<v1::EngineResponse> r = client.Call(lookup);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kInvalidArgument));

  v1::EngineRequest store;
  v1::StoreItem* item = store.mutable_prepare_store()->add_items();
  *item->mutable_key() = ToProto(Keys(1)[0]);
  item->set_num_tokens(0);
  r = client.Call(store);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prepare_store().chunks(0).status().code(), int(absl::StatusCode::kInvalidArgument));

  v1::EngineRequest commit;
  commit.mutable_commit()->add_handles(424242);
  r = client.Call(commit);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->handles().statuses(0).code(), int(absl::StatusCode::kInvalidArgument));

  v1::EngineRequest empty;  // no body
  r = client.Call(empty);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kInvalidArgument));

  v1::EngineRequest digest = test_support::LookupRequest(Keys(2));  // a digest cut short
  digest.mutable_lookup()->mutable_chain()->mutable_digests()->pop_back();
  r = client.Call(digest);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(r->status().message(), HasSubstr("whole number"));

  v1::EngineRequest algorithm = test_support::PrepareLoadRequest(Keys(1));  // unknown algorithm
  algorithm.mutable_prepare_load()->mutable_chain()->set_algorithm(
      static_cast<v1::HashAlgorithm>(99));
  r = client.Call(algorithm);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(r->prepare_load().chunks_size(), 0) << "nothing leased for a malformed chain";

  // Still serving this session.
  v1::EngineRequest ok_lookup = test_support::LookupRequest(Keys(1));
  r = client.Call(ok_lookup);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), 0);
}

// LayersSaved (a prefill's streamed saves) on a daemon without a remote tier: a store asking to
// stream is reserved but not streamed, the announcement is taken and ignored (one naming more
// layers than the layout has is refused), and every request kind is timed in the metrics.
TEST_F(EngineSessionServerTest, StreamedSavesWithoutARemoteTierAreStoredPlainly) {
  prometheus::Registry registry;
  std::unique_ptr<EngineSessionServer> timed =
      *EngineSessionServer::Create({.socket_path = (dir_ / "timed.sock").string(),
                                    .store = store_.get(),
                                    .registry = &registry});
  timed->Start();
  RawEngineClient client(timed->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  v1::EngineRequest store;
  v1::StoreItem* item = store.mutable_prepare_store()->add_items();
  *item->mutable_key() = ToProto(Keys(1)[0]);
  item->set_num_tokens(16);
  item->set_stream_to("decode-node");
  absl::StatusOr<v1::EngineResponse> r = client.Call(store);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prepare_store().chunks(0).status().code(), 0);
  EXPECT_FALSE(r->prepare_store().chunks(0).streamed());
  const uint64_t handle = r->prepare_store().chunks(0).handle();

  v1::EngineRequest saved;
  saved.mutable_layers_saved()->add_handles(handle);
  saved.mutable_layers_saved()->set_layers(1);
  r = client.Call(saved);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), 0);
  saved.mutable_layers_saved()->set_layers(TestLayout().num_layers + 1);
  r = client.Call(saved);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kInvalidArgument));

  v1::EngineRequest commit;
  commit.mutable_commit()->add_handles(handle);
  r = client.Call(commit);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->handles().statuses(0).code(), 0);
  EXPECT_TRUE(tier_->Contains(Keys(1)[0]));

  uint64_t timed_announcements = 0;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != "strata_engine_request_duration_seconds") continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      if (metric.label.size() == 1 && metric.label[0].value == "layers_saved") {
        timed_announcements = metric.histogram.sample_count;
      }
    }
  }
  EXPECT_EQ(timed_announcements, 2u);
  timed->Stop();
}

TEST_F(EngineSessionServerTest, HandshakeIsRequiredAndChecked) {
  RawEngineClient early(server_->socket_path());
  v1::EngineRequest lookup;
  lookup.mutable_lookup();
  absl::StatusOr<v1::EngineResponse> r = early.Call(lookup);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(early.Receive().ok()) << "the session is closed after the refusal";

  RawEngineClient bad_layout(server_->socket_path());
  KvLayout layout = TestLayout();
  layout.head_dim = 0;
  r = bad_layout.Handshake(layout);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(bad_layout.arena(), nullptr);

  RawEngineClient old_version(server_->socket_path());
  v1::EngineRequest hello;
  hello.mutable_handshake()->set_protocol_version(99);
  *hello.mutable_handshake()->mutable_layout() = ToProto(TestLayout());
  r = old_version.Call(hello);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kFailedPrecondition));
}

TEST_F(EngineSessionServerTest, GarbageTruncatedAndOversizedFramesCloseOnlyThatSession) {
  RawEngineClient healthy(server_->socket_path());
  ASSERT_TRUE(healthy.Handshake(TestLayout()).ok());

  RawEngineClient garbage(server_->socket_path());
  ASSERT_TRUE(garbage.Handshake(TestLayout()).ok());
  ASSERT_TRUE(
      SendFrame(garbage.fd(), std::string("\xff\xff\xff\xff\xff garbage", 14), milliseconds(100))
          .ok());
  absl::StatusOr<v1::EngineResponse> error = garbage.Receive();
  ASSERT_TRUE(error.ok()) << error.status();
  EXPECT_EQ(error->status().code(), int(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(garbage.Receive().ok());

  RawEngineClient oversized(server_->socket_path());
  const char huge[4] = {0, 0, 0, 0x40};  // 1 GiB
  ASSERT_EQ(::write(oversized.fd(), huge, 4), 4);
  error = oversized.Receive();
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->status().code(), int(absl::StatusCode::kInvalidArgument));

  {
    RawEngineClient truncated(server_->socket_path());
    ASSERT_TRUE(truncated.Handshake(TestLayout()).ok());
    const char partial[6] = {100, 0, 0, 0, 1, 2};
    ASSERT_EQ(::write(truncated.fd(), partial, 6), 6);
  }  // closed mid-frame

  v1::EngineRequest lookup = test_support::LookupRequest(Keys(1));
  absl::StatusOr<v1::EngineResponse> r = healthy.Call(lookup);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), 0);
  for (int i = 0; i < 200 && server_->Stats().protocol_errors < 3; ++i) ::usleep(5000);
  EXPECT_EQ(server_->Stats().protocol_errors, 3u);
  EXPECT_EQ(server_->Stats().active_sessions, 1u);
}

TEST_F(EngineSessionServerTest, PerSessionLimitsAreResourceExhaustedAndInvalidArgument) {
  std::unique_ptr<EngineSessionServer> limited =
      *EngineSessionServer::Create({.socket_path = (dir_ / "limited.sock").string(),
                                    .store = store_.get(),
                                    .max_items_per_request = 4,
                                    .max_handles_per_session = 2});
  limited->Start();
  RawEngineClient client(limited->socket_path());
  ASSERT_TRUE(client.Handshake(TestLayout()).ok());
  v1::EngineRequest store;
  for (const ChunkKey& key : Keys(3)) {
    v1::StoreItem* item = store.mutable_prepare_store()->add_items();
    *item->mutable_key() = ToProto(key);
    item->set_num_tokens(16);
  }
  absl::StatusOr<v1::EngineResponse> r = client.Call(store);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(tier_->Stats().reservations, 0u) << "nothing reserved for a refused batch";

  v1::EngineRequest lookup = test_support::LookupRequest(Keys(5));
  r = client.Call(lookup);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status().code(), int(absl::StatusCode::kInvalidArgument));
  limited->Stop();
}

TEST_F(EngineSessionServerTest, RefusesASecondServerOnTheSamePath) {
  absl::StatusOr<std::unique_ptr<EngineSessionServer>> second =
      EngineSessionServer::Create({.socket_path = server_->socket_path(), .store = store_.get()});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(EngineSessionServerTest, SocketIsGroupOnly) {
  using std::filesystem::perms;
  const perms mode = std::filesystem::status(server_->socket_path()).permissions();
  EXPECT_EQ(mode & perms::all,
            perms::owner_read | perms::owner_write | perms::group_read | perms::group_write);
}

// The handshake grants each layout's engines its device pool (T0): the grant describes the
// pages, and a host pool's descriptor follows the arena's, so the engine maps the pages the
// daemon writes. A layout that cannot have a pool handshakes without one.
TEST_F(EngineSessionServerTest, TheHandshakeGrantsTheLayoutsDevicePool) {
  storage::HostRuntime runtime;
  // 2 layers x 2 KiB per 16-token page: 8 pages.
  storage::DevicePools pools(runtime, {.bytes_per_layout = 8 * 4096, .block_tokens = 16});
  auto server = *EngineSessionServer::Create({.socket_path = (dir_ / "pools.sock").string(),
                                              .store = store_.get(),
                                              .device_pools = &pools});
  server->Start();

  RawEngineClient engine(server->socket_path());
  absl::StatusOr<v1::EngineResponse> hello = engine.Handshake(TestLayout());
  ASSERT_TRUE(hello.ok()) << hello.status();
  ASSERT_EQ(hello->status().code(), 0) << hello->status().message();
  ASSERT_TRUE(hello->handshake().has_device_pool());
  const v1::DevicePoolGrant& grant = hello->handshake().device_pool();
  EXPECT_EQ(grant.backend(), "host");
  EXPECT_EQ(grant.num_layers(), 2u);
  EXPECT_EQ(grant.num_pages(), 8u);
  EXPECT_EQ(grant.page_bytes(), 2048u);
  EXPECT_EQ(grant.block_tokens(), 16u);
  EXPECT_EQ(grant.size_bytes(), 8u * 4096);
  ASSERT_NE(engine.arena(), nullptr);
  ASSERT_GE(engine.device_pool_fd(), 0) << "the pool's descriptor follows the arena's";

  // The daemon writes a page; the engine's mapping of the granted pool reads it there.
  absl::StatusOr<storage::DevicePool*> pool = pools.ForLayout(TestLayout());
  ASSERT_TRUE(pool.ok());
  std::memset((*pool)->PageData(1, 5), 0x6b, grant.page_bytes());
  storage::SharedMemoryHandle handle{
      .backend = grant.backend(), .size_bytes = grant.size_bytes(), .fd = engine.device_pool_fd()};
  auto mapped = runtime.OpenShared(handle);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const auto* page =
      static_cast<const unsigned char*>((*mapped)->data()) + (*pool)->geometry().offset(1, 5);
  EXPECT_EQ(page[0], 0x6b);
  EXPECT_EQ(page[grant.page_bytes() - 1], 0x6b);

  // A second engine of the layout gets the same pool.
  RawEngineClient second(server->socket_path());
  absl::StatusOr<v1::EngineResponse> again = second.Handshake(TestLayout());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->handshake().device_pool().num_pages(), 8u);
  EXPECT_EQ(pools.Stats().size(), 1u);

  // A layout of 24-token chunks cannot have 16-token pages: it handshakes without a pool.
  KvLayout no_pool = test_support::SmallLayout({.model_id = "no-pool", .chunk_tokens = 24});
  RawEngineClient plain(server->socket_path());
  absl::StatusOr<v1::EngineResponse> refused = plain.Handshake(no_pool);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->status().code(), 0) << "no pool is no reason to refuse the engine";
  EXPECT_FALSE(refused->handshake().has_device_pool());
  EXPECT_NE(plain.arena(), nullptr);
  EXPECT_LT(plain.device_pool_fd(), 0);
  server->Stop();
}

// The device pool's requests over the protocol: pages reserved by one engine, written through
// its mapping and committed, are found, referenced and read in place by another engine; the
// pool refuses what admission cannot cover, a second writer, a chunk already there, and keys
// that are not position-independent ones of the session's layout.
class DevicePoolSessionTest : public EngineSessionServerTest {
 protected:
  void SetUp() override {
    EngineSessionServerTest::SetUp();
    // 8 pages of one 16-token block of every layer (2 x 2 KiB).
    pools_.emplace(runtime_,
                   storage::DevicePoolsOptions{.bytes_per_layout = 8 * 4096, .block_tokens = 16});
    pool_server_ = *EngineSessionServer::Create({.socket_path = (dir_ / "pools.sock").string(),
                                                 .store = store_.get(),
                                                 .device_pools = &*pools_,
                                                 .registry = &registry_});
    pool_server_->Start();
  }
  void TearDown() override {
    pool_server_->Stop();
    pool_server_.reset();
    EngineSessionServerTest::TearDown();
  }

  ChunkKey Pic(uint32_t first_token) const {
    std::vector<uint32_t> tokens(16);
    std::iota(tokens.begin(), tokens.end(), first_token);
    return hasher_->PicKey(tokens, 0);
  }
  static v1::EngineRequest PoolRequest(std::span<const ChunkKey> keys,
                                       std::span<const uint32_t> num_pages = {}) {
    v1::EngineRequest request;
    if (num_pages.empty()) {
      EXPECT_TRUE(ToProto(keys, *request.mutable_pool_acquire()->mutable_keys()).ok());
    } else {
      v1::PoolReserveRequest* reserve = request.mutable_pool_reserve();
      EXPECT_TRUE(ToProto(keys, *reserve->mutable_keys()).ok());
      reserve->mutable_num_pages()->Add(num_pages.begin(), num_pages.end());
    }
    return request;
  }
  static v1::EngineRequest Handles(v1::EngineRequest request, std::span<const uint64_t> handles,
                                   v1::HandlesRequest* (v1::EngineRequest::*body)()) {
    (request.*body)()->mutable_handles()->Add(handles.begin(), handles.end());
    return request;
  }
  storage::DevicePool& pool() { return **pools_->ForLayout(TestLayout()); }
  // The pool as `engine` maps it.
  std::unique_ptr<storage::DeviceAllocation> Map(const RawEngineClient& engine) {
    auto mapped = runtime_.OpenShared({.backend = "host",
                                       .size_bytes = pool().geometry().total_bytes(),
                                       .fd = engine.device_pool_fd()});
    EXPECT_TRUE(mapped.ok()) << mapped.status();
    return mapped.ok() ? *std::move(mapped) : nullptr;
  }

  // The number of requests of kind `op` the server timed.
  uint64_t Timed(std::string_view op) {
    for (const prometheus::MetricFamily& family : registry_.Collect()) {
      if (family.name != "strata_engine_request_duration_seconds") continue;
      for (const prometheus::ClientMetric& metric : family.metric) {
        if (metric.label.size() == 1 && metric.label[0].value == op) {
          return metric.histogram.sample_count;
        }
      }
    }
    return 0;
  }

  prometheus::Registry registry_;
  storage::HostRuntime runtime_;
  std::optional<storage::DevicePools> pools_;
  std::unique_ptr<EngineSessionServer> pool_server_;
};

TEST_F(DevicePoolSessionTest, ChunksWrittenByOneEngineAreReadInPlaceByAnother) {
  RawEngineClient writer(pool_server_->socket_path());
  ASSERT_TRUE(writer.Handshake(TestLayout()).ok());
  const std::vector<ChunkKey> keys = {Pic(100), Pic(200)};
  const uint32_t pages[] = {1, 2};
  auto reserved = writer.Call(PoolRequest(keys, pages));
  ASSERT_TRUE(reserved.ok() && reserved->status().code() == 0) << reserved->status().message();
  ASSERT_EQ(reserved->pool_chunks().chunks_size(), 2);
  auto mapping = Map(writer);
  ASSERT_NE(mapping, nullptr);
  const storage::DevicePoolGeometry& geometry = pool().geometry();
  std::vector<uint64_t> handles;
  std::vector<uint32_t> written;
  for (const v1::PoolChunk& chunk : reserved->pool_chunks().chunks()) {
    ASSERT_EQ(chunk.status().code(), 0) << chunk.status().message();
    handles.push_back(chunk.handle());
    for (uint32_t page : chunk.pages()) {
      for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
        std::memset(static_cast<std::byte*>(mapping->data()) + geometry.offset(layer, page),
                    static_cast<int>(0x30 + page), geometry.page_bytes);
      }
      written.push_back(page);
    }
  }
  EXPECT_EQ(pool().Stats().reservations, 2u);
  auto committed = writer.Call(Handles({}, handles, &v1::EngineRequest::mutable_commit));
  ASSERT_TRUE(committed.ok());
  for (const v1::Status& status : committed->handles().statuses()) EXPECT_EQ(status.code(), 0);

  RawEngineClient reader(pool_server_->socket_path());
  ASSERT_TRUE(reader.Handshake(TestLayout()).ok());
  v1::EngineRequest lookup;
  const std::vector<ChunkKey> three = {Pic(100), Pic(200), Pic(300)};
  ASSERT_TRUE(ToProto(three, *lookup.mutable_pool_lookup()->mutable_keys()).ok());
  auto found = reader.Call(lookup);
  ASSERT_TRUE(found.ok() && found->status().code() == 0);
  EXPECT_THAT(found->pool_lookup().resident(), ::testing::ElementsAre(true, true, false));
  auto acquired = reader.Call(PoolRequest(three));
  ASSERT_TRUE(acquired.ok() && acquired->status().code() == 0);
  ASSERT_EQ(acquired->pool_chunks().chunks_size(), 3);
  EXPECT_EQ(acquired->pool_chunks().chunks(2).status().code(),
            static_cast<int>(absl::StatusCode::kNotFound));
  auto read_mapping = Map(reader);
  ASSERT_NE(read_mapping, nullptr);
  std::vector<uint64_t> refs;
  std::vector<uint32_t> read;
  for (int i = 0; i < 2; ++i) {
    const v1::PoolChunk& chunk = acquired->pool_chunks().chunks(i);
    ASSERT_EQ(chunk.status().code(), 0);
    refs.push_back(chunk.handle());
    for (uint32_t page : chunk.pages()) {
      const auto* bytes =
          reinterpret_cast<const unsigned char*>(read_mapping->data()) + geometry.offset(1, page);
      EXPECT_EQ(bytes[0], 0x30 + page);
      EXPECT_EQ(bytes[geometry.page_bytes - 1], 0x30 + page);
      read.push_back(page);
    }
  }
  EXPECT_EQ(read, written) << "the same pages, not copies";
  EXPECT_EQ(pool().Stats().references, 2u);
  EXPECT_EQ(pool().Stats().referenced_pages, 3u);

  // Reserving a committed chunk, one another writer holds, or one that admission cannot cover.
  auto again = reader.Call(PoolRequest(std::vector<ChunkKey>{Pic(100)}, std::vector<uint32_t>{1}));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->pool_chunks().chunks(0).status().code(),
            static_cast<int>(absl::StatusCode::kAlreadyExists));
  auto open = writer.Call(PoolRequest(std::vector<ChunkKey>{Pic(400)}, std::vector<uint32_t>{1}));
  ASSERT_TRUE(open.ok() && open->pool_chunks().chunks(0).status().code() == 0);
  auto second_writer =
      reader.Call(PoolRequest(std::vector<ChunkKey>{Pic(400)}, std::vector<uint32_t>{1}));
  EXPECT_EQ(second_writer->pool_chunks().chunks(0).status().code(),
            static_cast<int>(absl::StatusCode::kAborted));
  // 8 pages: 3 referenced, 1 reserved, 4 free; 5 cannot be had and nothing is evicted for them.
  auto too_many =
      reader.Call(PoolRequest(std::vector<ChunkKey>{Pic(500)}, std::vector<uint32_t>{5}));
  EXPECT_EQ(too_many->pool_chunks().chunks(0).status().code(),
            static_cast<int>(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(pool().Stats().admission_rejects, 1u);

  // A pool handle is released like a lease; twice is an error; a host handle is not a pool's.
  auto released = reader.Call(Handles({}, refs, &v1::EngineRequest::mutable_release));
  ASSERT_TRUE(released.ok());
  for (const v1::Status& status : released->handles().statuses()) EXPECT_EQ(status.code(), 0);
  auto twice = reader.Call(Handles({}, refs, &v1::EngineRequest::mutable_release));
  EXPECT_EQ(twice->handles().statuses(0).code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(pool().Stats().references, 0u);
  EXPECT_TRUE(pool().CheckConsistency().ok()) << pool().CheckConsistency();
  // Each kind of pool request is timed apart.
  EXPECT_EQ(Timed("pool_lookup"), 1u);
  EXPECT_EQ(Timed("pool_acquire"), 1u);
  EXPECT_EQ(Timed("pool_reserve"), 5u);
}

TEST_F(DevicePoolSessionTest, BadPoolRequestsAreRefusedAndTheSessionGoesOn) {
  RawEngineClient engine(pool_server_->socket_path());
  ASSERT_TRUE(engine.Handshake(TestLayout()).ok());
  // Prefix keys do not name device pool chunks.
  auto prefix = engine.Call(PoolRequest(Keys(1)));
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(prefix->status().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(prefix->status().message(), HasSubstr("position-independent"));
  // One page count per key.
  auto uneven =
      engine.Call(PoolRequest(std::vector<ChunkKey>{Pic(1), Pic(2)}, std::vector<uint32_t>{1}));
  EXPECT_EQ(uneven->status().code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  // More pages than the pool has, and none.
  auto huge = engine.Call(PoolRequest(std::vector<ChunkKey>{Pic(1)}, std::vector<uint32_t>{9}));
  EXPECT_EQ(huge->pool_chunks().chunks(0).status().code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  auto none = engine.Call(PoolRequest(std::vector<ChunkKey>{Pic(1)}, std::vector<uint32_t>{0}));
  EXPECT_EQ(none->pool_chunks().chunks(0).status().code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  // The session still serves.
  auto fine = engine.Call(PoolRequest(std::vector<ChunkKey>{Pic(1)}, std::vector<uint32_t>{1}));
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(fine->pool_chunks().chunks(0).status().code(), 0);

  // A session whose daemon has no device pool.
  RawEngineClient plain(server_->socket_path());
  ASSERT_TRUE(plain.Handshake(TestLayout()).ok());
  auto no_pool = plain.Call(PoolRequest(std::vector<ChunkKey>{Pic(1)}));
  ASSERT_TRUE(no_pool.ok());
  EXPECT_EQ(no_pool->status().code(), static_cast<int>(absl::StatusCode::kFailedPrecondition));
}

// An engine process killed while it holds references and reservations: its session ends and
// every page comes back.
TEST_F(DevicePoolSessionTest, AKilledEnginesReferencesAndReservationsAreReturned) {
  {
    RawEngineClient writer(pool_server_->socket_path());
    ASSERT_TRUE(writer.Handshake(TestLayout()).ok());
    auto reserved =
        writer.Call(PoolRequest(std::vector<ChunkKey>{Pic(1)}, std::vector<uint32_t>{2}));
    ASSERT_TRUE(reserved.ok() && reserved->pool_chunks().chunks(0).status().code() == 0);
    const uint64_t handle[] = {reserved->pool_chunks().chunks(0).handle()};
    ASSERT_TRUE(writer.Call(Handles({}, handle, &v1::EngineRequest::mutable_commit)).ok());
  }
  const std::string socket = pool_server_->socket_path();
  const KvLayout layout = TestLayout();
  const ChunkKey shared = Pic(1);
  const ChunkKey fresh = Pic(2);
  storage::testing::ForkedChild engine([&](int parent) {
    RawEngineClient client(socket);
    if (!client.Handshake(layout).ok()) return 2;
    auto acquired = client.Call(PoolRequest(std::vector<ChunkKey>{shared}));
    if (!acquired.ok() || acquired->pool_chunks().chunks(0).status().code() != 0) return 3;
    auto reserved =
        client.Call(PoolRequest(std::vector<ChunkKey>{fresh}, std::vector<uint32_t>{3}));
    if (!reserved.ok() || reserved->pool_chunks().chunks(0).status().code() != 0) return 4;
    if (::write(parent, "r", 1) != 1) return 5;
    ::pause();
    return 0;
  });
  ASSERT_TRUE(engine.started());
  pollfd readable{.fd = engine.socket(), .events = POLLIN, .revents = 0};
  ASSERT_EQ(::poll(&readable, 1, 10'000), 1) << "the engine did not get its pages in time";
  char ready = 0;
  ASSERT_EQ(::read(engine.socket(), &ready, 1), 1) << "the engine did not get its pages";
  EXPECT_EQ(pool().Stats().references, 1u);
  EXPECT_EQ(pool().Stats().reservations, 1u);
  EXPECT_EQ(pool().Stats().free_pages, 3u);
  engine.Kill(SIGKILL);
  EXPECT_EQ(engine.Wait(std::chrono::seconds(10)), 128 + SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((pool().Stats().references != 0 || pool().Stats().reservations != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  const storage::DevicePoolStats stats = pool().Stats();
  EXPECT_EQ(stats.references, 0u);
  EXPECT_EQ(stats.reservations, 0u);
  EXPECT_EQ(stats.free_pages, 6u);
  EXPECT_EQ(stats.referenced_pages, 0u) << "the shared chunk is evictable again";
  EXPECT_TRUE(pool().CheckConsistency().ok()) << pool().CheckConsistency();
}

}  // namespace
}  // namespace strata::daemon
