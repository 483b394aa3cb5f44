#include "storage/tiered/tiered_store.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/codec/codec_registry.h"
#include "storage/host/test_util.h"
#include "storage/io/testing/io_test_util.h"
#include "storage/tiered/testing/disk_in_place_of.h"
#include "storage/tiered/testing/store_test_base.h"

namespace strata::storage {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::kChunkBytes;

class TieredStoreTest : public testing::TieredStoreTestBase {};

TEST_F(TieredStoreTest, HostHitsAreLeasedAtOnceAndAMissStopsTheLoad) {
  Open(/*with_disk=*/false);
  EXPECT_THAT(store_->tiers(), ElementsAre(Tier::kHost));
  Store(0);
  Store(1);
  bool deferred = true;
  LoadLeases leased = Load(Keys(0, 2), deferred);
  EXPECT_FALSE(deferred);
  ASSERT_TRUE(leased.failure.ok()) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 2u);
  EXPECT_TRUE(Holds(leased.leases[0], 0));
  EXPECT_TRUE(Holds(leased.leases[1], 1));
  EXPECT_EQ(leased.leases[0].owner(), 7u);

  // Chunk 2 is in no tier: the load is the prefix before it, failed at it.
  leased = Load({Key(0), Key(2), Key(1)}, deferred);
  EXPECT_FALSE(deferred);
  EXPECT_EQ(leased.leases.size(), 1u);
  EXPECT_EQ(leased.failure.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store_->Stats().movement.async_loads, 0u);

  EXPECT_THAT(store_->LocatePrefix(Keys(0, 3)), ElementsAre(Tier::kHost, Tier::kHost));
  EXPECT_EQ(*store_->Prefetch(layout_, Keys(0, 3)), 0u);
  EXPECT_EQ(store_->Move(Keys(0, 1), Tier::kDisk, &layout_).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*store_->FlushToLowerTiers(), 0u);
}

TEST_F(TieredStoreTest, LowerTierHitsArePromotedAndLeasedOnTheStoresThread) {
  Open(/*with_disk=*/true);
  for (uint64_t id = 0; id < 7; ++id) Store(id);  // 0, 1 and 2 are evicted to disk (LRU)
  EXPECT_THAT(store_->TiersOf(Key(0)), ElementsAre(Tier::kDisk));
  EXPECT_THAT(store_->TiersOf(Key(6)), ElementsAre(Tier::kHost));
  EXPECT_THAT(store_->LocatePrefix(Keys(0, 5)),
              ElementsAre(Tier::kDisk, Tier::kDisk, Tier::kDisk, Tier::kHost, Tier::kHost));

  // Chunks 5, 6 are host hits, 0, 1 come up from disk (evicting 3 and 4); the load goes on
  // asynchronously.
  bool deferred = false;
  LoadLeases leased = Load({Key(5), Key(0), Key(1), Key(6)}, deferred);
  EXPECT_TRUE(deferred);
  ASSERT_TRUE(leased.failure.ok()) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 4u);
  EXPECT_TRUE(Holds(leased.leases[0], 5));
  EXPECT_TRUE(Holds(leased.leases[1], 0));
  EXPECT_TRUE(Holds(leased.leases[2], 1));
  EXPECT_TRUE(Holds(leased.leases[3], 6));
  EXPECT_EQ(leased.promoted_chunks, 2u);
  const TieredStoreStats stats = store_->Stats();
  EXPECT_EQ(stats.movement.async_loads, 1u);
  EXPECT_EQ(stats.movement.load_promoted, 2u);
  ASSERT_EQ(stats.lower.size(), 1u);
  EXPECT_EQ(stats.lower[0].tier, Tier::kDisk);
  EXPECT_EQ(stats.lower[0].reads, 2u);
  leased.leases.clear();

  // A chunk in neither tier past a lower-tier hit fails the load there, after the hit.
  leased = Load({Key(2), Key(99)}, deferred);
  EXPECT_TRUE(deferred);
  EXPECT_EQ(leased.leases.size(), 1u);
  EXPECT_EQ(leased.failure.code(), absl::StatusCode::kAborted);
}

// [disk] codec: the layout announced, evicted chunks are stored encoded and promoted as the codec
// decodes them, committed with the decoded chunk's checksum (the lease verifies it).
TEST_F(TieredStoreTest, ADiskCodecStoresEvictionsEncodedAndPromotesThemDecoded) {
  Open(/*with_disk=*/true, /*demotion_queue_bytes=*/0, "int8");
  ASSERT_TRUE(store_->NoteLayout(layout_).ok());
  for (uint64_t id = 0; id < 6; ++id) Store(id);  // 0 and 1 are evicted to disk
  ASSERT_THAT(store_->TiersOf(Key(0)), ElementsAre(Tier::kDisk));
  const LowerTierStats disk = store_->Stats().lower[0];
  EXPECT_EQ(disk.encoded_chunks, 2u);
  EXPECT_EQ(disk.payload_bytes, 2 * kChunkBytes);
  EXPECT_LT(disk.stored_bytes, disk.payload_bytes);

  const Codec* int8 = *CodecRegistry::Find("int8");
  std::vector<std::byte> expected(kChunkBytes);
  const std::vector<std::byte> original = testing::Pattern(0, kChunkBytes);
  ASSERT_TRUE(int8->Decode(layout_, *int8->Encode(layout_, 16, original, {}), expected).ok());
  bool deferred = false;
  LoadLeases leased = Load({Key(0)}, deferred);
  ASSERT_TRUE(leased.failure.ok()) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 1u);
  std::vector<std::byte> promoted(kChunkBytes);
  leased.leases[0].payload().CopyTo(promoted);
  EXPECT_EQ(promoted, expected);
  EXPECT_EQ(leased.leases[0].checksum(), ChecksumBytes(expected));
  leased.leases.clear();

  // A codec the registry does not know is refused before anything opens.
  EXPECT_EQ(TieredStore::Create({.host = {.capacity_bytes = 4 * kChunkBytes, .page_bytes = 4096},
                                 .disk = TieredDiskOptions{.directory = scratch_.path() + "/x",
                                                           .capacity_bytes = 1 << 20,
                                                           .segment_bytes = 64 << 10,
                                                           .codec = "zip"}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// Recode (Compress, Decompress) runs its chunks side by side on the recode threads, or one by
// one on the caller without them: the same totals and chunks either way. An error stops it with
// the error of the first key that failed.
TEST_F(TieredStoreTest, RecodeRecodesChunksSideBySideAndTheFirstErrorIsTheAnswer) {
  const Codec* int8 = *CodecRegistry::Find("int8");
  for (const uint32_t threads : {0u, 3u}) {
    SCOPED_TRACE(threads);
    store_.reset();
    codec_threads_ = threads;
    Open(/*with_disk=*/true);
    ASSERT_TRUE(store_->NoteLayout(layout_).ok());
    for (uint64_t id = 0; id < 12; ++id) Store(id);  // 0-7 are evicted to disk, as they are
    std::vector<ChunkKey> keys = Keys(0, 8);
    keys.push_back(Key(99));  // in no tier
    absl::StatusOr<RecodeTotals> totals = store_->Recode(keys, Tier::kDisk, {.codec = int8});
    ASSERT_TRUE(totals.ok()) << totals.status();
    EXPECT_EQ(totals->recoded, 8u);
    EXPECT_EQ(totals->missing, 1u);
    EXPECT_EQ(totals->stored_bytes_before, 8 * kChunkBytes);
    EXPECT_LT(totals->stored_bytes_after, totals->stored_bytes_before);
    double largest = 0;  // the chunks' own errors: NaN when the pattern holds a NaN
    for (uint64_t id = 0; id < 8; ++id) {
      std::vector<std::byte> expected(kChunkBytes);
      ASSERT_TRUE(int8->Decode(layout_,
                               *int8->Encode(layout_, 16, testing::Pattern(id, kChunkBytes), {}),
                               expected)
                      .ok());
      const std::optional<LowerTier::ChunkInfo> info = store_->DescribeBelowHost(Key(id));
      ASSERT_TRUE(info.has_value()) << id;
      EXPECT_EQ(info->codec, CodecId::kInt8) << id;
      EXPECT_EQ(info->payload_checksum, ChecksumBytes(expected)) << id;
      ASSERT_TRUE(info->error.has_value()) << id;
      const double error = info->error->relative_frobenius;
      largest = std::isnan(largest) || std::isnan(error) ? NAN : std::max(largest, error);
    }
    if (std::isnan(largest)) {
      EXPECT_TRUE(std::isnan(totals->max_error.relative_frobenius));
    } else {
      EXPECT_DOUBLE_EQ(totals->max_error.relative_frobenius, largest);
    }
    // Decompressed again, then refused by every chunk: the first key's error, nothing changed.
    totals = store_->Recode(keys, Tier::kDisk, {});
    ASSERT_TRUE(totals.ok()) << totals.status();
    EXPECT_EQ(totals->recoded, 8u);
    totals = store_->Recode(keys, Tier::kDisk, {.codec = int8, .params = {.bits = 4}});
    EXPECT_EQ(totals.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(totals.status().message()), HasSubstr(Key(0).ToString()));
    for (uint64_t id = 0; id < 8; ++id) {
      EXPECT_EQ(store_->DescribeBelowHost(Key(id))->codec, std::nullopt) << id;
    }
    ASSERT_TRUE(store_->Clear({}, std::nullopt).ok());  // the next round starts empty
  }
}

// [disk.tenant_codecs]: a tenant's chunks are written to disk as its own codec says, whichever
// path writes them (eviction, write-through, a flush); other tenants' and untracked chunks as
// [disk] codec says. A tenant the registry does not know a codec of is refused at Create.
TEST_F(TieredStoreTest, EachTenantsChunksAreWrittenToDiskAsItsCodecSays) {
  for (const bool write_through : {false, true}) {
    SCOPED_TRACE(write_through ? "write-through" : "write-back");
    store_.reset();
    const std::string directory =
        scratch_.path() + (write_through ? "/write-through" : "/write-back");
    TieredStoreOptions options;
    options.host = {.capacity_bytes = 4 * kChunkBytes, .page_bytes = 4096, .policy = "lru"};
    options.disk = TieredDiskOptions{.directory = directory,
                                     .capacity_bytes = 1 << 20,
                                     .segment_bytes = 64 << 10,
                                     .codec = "int8",
                                     .tenant_codecs = {{"exact", {.codec = ""}}}};
    options.movement.write_through = write_through;
    absl::StatusOr<std::unique_ptr<TieredStore>> store = TieredStore::Create(std::move(options));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    ASSERT_TRUE(store_->NoteLayout(layout_).ok());
    const std::optional<std::string_view> tenants[] = {"exact", "other", std::nullopt,
                                                       "exact", "exact", "other"};
    for (uint64_t id = 0; id < 6; ++id) {  // 0 and 1 are evicted
      absl::StatusOr<ReserveResult> reserved =
          store_->host().Reserve(layout_, Key(id), {.num_tokens = 16, .tenant_name = tenants[id]});
      ASSERT_TRUE(reserved.ok()) << reserved.status();
      reserved->reservation.payload().CopyFrom(testing::Pattern(id, kChunkBytes));
      ASSERT_TRUE(store_->host().Commit(std::move(reserved->reservation)).ok());
      // The writer's copy lease makes a chunk unevictable while it is written: let it finish,
      // so that the least recently used chunks are the ones evicted here too.
      if (write_through) store_->Flush();
    }
    EXPECT_EQ(store_->host().TenantOf(Key(2)), "");
    EXPECT_EQ(store_->host().TenantOf(Key(3)), "exact");
    EXPECT_EQ(store_->host().TenantOf(Key(0)), "") << "evicted: no longer in the host tier";
    ASSERT_TRUE(store_->FlushToLowerTiers().ok());  // 2..5, unless written through already
    store_->Flush();
    for (uint64_t id = 0; id < 6; ++id) {
      const std::optional<LowerTier::ChunkInfo> info = store_->DescribeBelowHost(Key(id));
      ASSERT_TRUE(info.has_value()) << id;
      if (tenants[id] == "exact") {
        EXPECT_EQ(info->codec, std::nullopt) << id;
        EXPECT_EQ(info->stored_bytes, kChunkBytes) << id;
      } else {
        EXPECT_EQ(info->codec, CodecId::kInt8) << id;
        EXPECT_LT(info->stored_bytes, kChunkBytes) << id;
      }
    }
  }

  store_.reset();
  EXPECT_EQ(TieredStore::Create({.host = {.capacity_bytes = 4 * kChunkBytes, .page_bytes = 4096},
                                 .disk = TieredDiskOptions{.directory = scratch_.path() + "/x",
                                                           .capacity_bytes = 1 << 20,
                                                           .segment_bytes = 64 << 10,
                                                           .tenant_codecs = {{"a", {"zip"}}}}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TieredStoreTest, AfterStopALowerTierLoadIsUnavailableAndLeasesNothing) {
  Open(/*with_disk=*/true);
  for (uint64_t id = 0; id < 5; ++id) Store(id);  // 0 is on disk
  store_->Stop();
  bool called = false;
  std::optional<LoadLeases> leased =
      store_->AcquireForLoad(std::make_shared<const KvLayout>(layout_), {Key(4), Key(0)}, {},
                             [&called](LoadLeases) { called = true; });
  ASSERT_TRUE(leased.has_value());
  EXPECT_EQ(leased->failure.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(leased->leases.empty());
  EXPECT_FALSE(called);
  EXPECT_EQ(store_->host().Stats().active_leases, 0u);
  EXPECT_FALSE(store_->Submit([] {}));
}

// What a peer asking by key alone gets: descriptions of chunks below the host tier (the remote
// tier's excluded: a peer's question is never passed on), and their promotion at the size each
// was recorded with.
TEST_F(TieredStoreTest, PeersGetDiskChunksDescribedAndPromotedWithoutALayout) {
  OpenThreeTiers();
  for (uint64_t id = 0; id < 6; ++id) Store(id);  // 0, 1 are evicted to disk
  ASSERT_TRUE(store_->Move(Keys(5, 1), Tier::kRemote, &layout_).ok());
  const std::optional<LowerTier::ChunkInfo> info = store_->DescribeBelowHost(Key(0));
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->payload_bytes, kChunkBytes);
  EXPECT_EQ(info->num_tokens, 16u);
  EXPECT_FALSE(store_->DescribeBelowHost(Key(4)).has_value()) << "in the host tier only";
  EXPECT_FALSE(store_->DescribeBelowHost(Key(5)).has_value()) << "on the remote tier only";
  EXPECT_FALSE(store_->DescribeBelowHost(Key(99)).has_value());

  std::promise<void> done;
  ASSERT_TRUE(store_->PromoteForPeer({Key(0), Key(4), Key(5), Key(1), Key(99)},
                                     [&done]() mutable { done.set_value(); }));
  ASSERT_EQ(done.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(store_->host().Contains(Key(0)));
  EXPECT_TRUE(store_->host().Contains(Key(1)));
  EXPECT_FALSE(store_->host().Contains(Key(5))) << "not fetched from the remote tier";
  EXPECT_EQ(store_->Stats().movement.peer_promoted, 2u);
  bool deferred = true;
  LoadLeases leased = Load(Keys(0, 2), deferred);
  EXPECT_FALSE(deferred) << "host hits now";
  ASSERT_EQ(leased.leases.size(), 2u);
  EXPECT_TRUE(Holds(leased.leases[0], 0));
  EXPECT_TRUE(Holds(leased.leases[1], 1));
  leased.leases.clear();

  store_->Stop();
  bool called = false;
  EXPECT_FALSE(store_->PromoteForPeer({Key(2)}, [&called] { called = true; }));
  EXPECT_FALSE(called);
}

// A chunk evicted and still waiting for its disk write is on its way to disk, not missing.
TEST_F(TieredStoreTest, MoveServesChunksStagedForTheirDiskWrite) {
  Open(/*with_disk=*/true, /*demotion_queue_bytes=*/1 << 20);
  store_->HoldDemotionsForTesting(true);
  for (uint64_t id = 0; id < 5; ++id) Store(id);  // 0 is staged
  ASSERT_THAT(store_->TiersOf(Key(0)), ElementsAre(Tier::kDisk));
  ASSERT_EQ(store_->Stats().lower[0].chunks, 0u) << "not written yet";

  // To disk: the write is forced, so the chunk is on disk when Move answers.
  absl::StatusOr<MoveResult> moved = store_->Move(Keys(0, 1), Tier::kDisk, nullptr);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->moved_chunks, 1u);
  EXPECT_EQ(moved->missing_chunks, 0u);
  EXPECT_EQ(store_->Stats().lower[0].chunks, 1u);

  // To the host tier: chunk 1 (staged by the next store) is promoted from staging (no disk
  // read), and its disk copy, once written, removed; chunk 0 comes back from disk.
  Store(5);  // evicts 1 into staging
  ASSERT_THAT(store_->TiersOf(Key(1)), ElementsAre(Tier::kDisk));
  const uint64_t disk_reads = store_->Stats().lower[0].reads;
  EXPECT_EQ(store_->Move(Keys(0, 2), Tier::kHost, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "moving up needs the layout";
  moved = store_->Move(Keys(0, 2), Tier::kHost, &layout_);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->moved_chunks, 2u);
  EXPECT_EQ(moved->missing_chunks, 0u);
  EXPECT_EQ(store_->Stats().lower[0].reads, disk_reads + 1) << "chunk 1 came from staging";
  store_->HoldDemotionsForTesting(false);
  store_->Flush();
  // Promoting 0 and 1 evicted two others, staged then written; 0 and 1 are host-only.
  EXPECT_THAT(store_->TiersOf(Key(0)), ElementsAre(Tier::kHost));
  EXPECT_THAT(store_->TiersOf(Key(1)), ElementsAre(Tier::kHost));
}

TEST_F(TieredStoreTest, ClearAndFlushSpanTheTiers) {
  Open(/*with_disk=*/true);
  for (uint64_t id = 0; id < 6; ++id) Store(id);  // 0, 1 on disk; 2..5 in the host tier
  EXPECT_EQ(*store_->FlushToLowerTiers(), 4u);
  EXPECT_EQ(store_->Stats().lower[0].chunks, 6u);
  EXPECT_EQ(*store_->FlushToLowerTiers(), 0u) << "every host chunk has a disk copy";

  absl::StatusOr<RemoveResult> removed =
      store_->Clear({.keys = absl::flat_hash_set<ChunkKey>{Key(0), Key(2)}}, Tier::kDisk);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->chunks, 2u);
  EXPECT_THAT(store_->TiersOf(Key(2)), ElementsAre(Tier::kHost));
  removed = store_->Clear({}, std::nullopt);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->chunks, 4u + 4u);
  EXPECT_TRUE(store_->LocatePrefix(Keys(0, 6)).empty());
}

TEST_F(TieredStoreTest, TenantKeysFindATenantsChunksWhereverTheyWentAndPromotionsKeepThem) {
  Open(/*with_disk=*/true, /*demotion_queue_bytes=*/1 << 20);
  store_->HoldDemotionsForTesting(true);
  for (uint64_t id = 0; id < 5; ++id) {  // 0 is evicted, staged for its disk write
    absl::StatusOr<ReserveResult> reserved = store_->host().Reserve(
        layout_, Key(id), {.num_tokens = 16, .tenant_name = id % 2 == 0 ? "a" : "b"});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    reserved->reservation.payload().CopyFrom(testing::Pattern(id, kChunkBytes));
    ASSERT_TRUE(store_->host().Commit(std::move(reserved->reservation)).ok());
  }
  ASSERT_EQ(store_->Stats().lower[0].chunks, 0u) << "not written yet";
  const auto keys_of = [&](const std::string& tenant, std::optional<Tier> tier) {
    absl::StatusOr<std::vector<ChunkKey>> keys = store_->TenantKeys(tenant, tier);
    EXPECT_TRUE(keys.ok()) << keys.status();
    std::set<ChunkKey> set;
    if (keys.ok()) set.insert(keys->begin(), keys->end());
    EXPECT_EQ(set.size(), keys.ok() ? keys->size() : 0) << "each key once";
    return set;
  };
  // Every tier: the staged chunk is written first, and found on disk under its tenant.
  EXPECT_EQ(keys_of("a", std::nullopt), (std::set<ChunkKey>{Key(0), Key(2), Key(4)}));
  EXPECT_EQ(store_->Stats().lower[0].chunks, 1u);
  EXPECT_EQ(keys_of("a", Tier::kHost), (std::set<ChunkKey>{Key(2), Key(4)}));
  EXPECT_EQ(keys_of("a", Tier::kDisk), (std::set<ChunkKey>{Key(0)}));
  EXPECT_EQ(keys_of("b", std::nullopt), (std::set<ChunkKey>{Key(1), Key(3)}));
  EXPECT_TRUE(keys_of("b", Tier::kDisk).empty());
  EXPECT_TRUE(keys_of("", std::nullopt).empty());
  EXPECT_EQ(store_->TenantKeys("a", Tier::kRemote).status().code(),
            absl::StatusCode::kFailedPrecondition);

  // Promoted back, the chunk is the tenant's in the host tier again.
  absl::StatusOr<MoveResult> moved = store_->Move(Keys(0, 1), Tier::kHost, &layout_);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->moved_chunks, 1u);
  EXPECT_EQ(store_->host().TenantOf(Key(0)), "a");
  EXPECT_EQ(keys_of("a", Tier::kHost).count(Key(0)), 1u);
  store_->HoldDemotionsForTesting(false);
}

// A chunk promoted from disk counts against its tenant's host quota again, so the tenant that
// goes above its quota loses its own chunks, the promoted one included, not other tenants'.
TEST_F(TieredStoreTest, PromotedChunksCountAgainstTheirTenantsQuota) {
  tenant_quotas_ = {{"a", kChunkBytes}};
  Open(/*with_disk=*/true);
  const auto store = [&](uint64_t id, std::string_view tenant) {
    absl::StatusOr<ReserveResult> reserved =
        store_->host().Reserve(layout_, Key(id), {.num_tokens = 16, .tenant_name = tenant});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    reserved->reservation.payload().CopyFrom(testing::Pattern(id, kChunkBytes));
    ASSERT_TRUE(store_->host().Commit(std::move(reserved->reservation)).ok());
  };
  store(0, "a");
  for (uint64_t id = 1; id <= 4; ++id) store(id, "b");  // the 4th evicts a's chunk (at quota)
  ASSERT_THAT(store_->TiersOf(Key(0)), ElementsAre(Tier::kDisk));
  absl::StatusOr<MoveResult> moved = store_->Move(Keys(0, 1), Tier::kHost, &layout_);
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_EQ(moved->moved_chunks, 1u);  // evicting b's oldest, 1
  ASSERT_TRUE(store_->host().Contains(Key(0)));
  // a's next chunk takes a above its quota: a's promoted chunk goes, b's oldest (2) stays.
  store(5, "a");
  EXPECT_FALSE(store_->host().Contains(Key(0)));
  for (uint64_t id = 2; id <= 5; ++id) EXPECT_TRUE(store_->host().Contains(Key(id))) << id;
}

TEST_F(TieredStoreTest, RegisteredTiersJoinBelowTheDiskTierInOrder) {
  OpenThreeTiers();
  EXPECT_THAT(store_->tiers(), ElementsAre(Tier::kHost, Tier::kDisk, Tier::kRemote));
  EXPECT_TRUE(store_->has(Tier::kRemote));
  EXPECT_FALSE(store_->has(Tier::kDevice));
  const TieredStoreStats stats = store_->Stats();
  ASSERT_EQ(stats.lower.size(), 2u);
  EXPECT_EQ(stats.lower[0].tier, Tier::kDisk);
  EXPECT_EQ(stats.lower[1].tier, Tier::kRemote);
  store_.reset();

  // Out of order: a second disk tier below the disk tier, a tier in the host tier's place, none.
  testing::ScratchDir other;
  for (const Tier as : {Tier::kDisk, Tier::kHost}) {
    TieredStoreOptions options;
    options.host = {.capacity_bytes = 4 * kChunkBytes, .page_bytes = 4096};
    options.disk = TieredDiskOptions{.directory = scratch_.path(), .capacity_bytes = 1 << 20};
    options.lower.push_back(*testing::DiskInPlaceOf::Open(other.path(), as));
    absl::StatusOr<std::unique_ptr<TieredStore>> refused = TieredStore::Create(std::move(options));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << TierName(as);
  }
  TieredStoreOptions null_tier;
  null_tier.host = {.capacity_bytes = 4 * kChunkBytes, .page_bytes = 4096};
  null_tier.lower.push_back(nullptr);
  EXPECT_EQ(TieredStore::Create(std::move(null_tier)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TieredStoreTest, EvictionsGoToTheNearestTierAndLoadsComeFromAnyTier) {
  OpenThreeTiers();
  for (uint64_t id = 0; id < 5; ++id) Store(id);  // 0 is evicted: to the disk tier, the nearest
  EXPECT_THAT(store_->TiersOf(Key(0)), ElementsAre(Tier::kDisk));
  // 1 and 2 go to the remote tier; 0 stays on disk; 3 and 4 are host hits.
  absl::StatusOr<MoveResult> moved = store_->Move(Keys(1, 2), Tier::kRemote, nullptr);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->moved_chunks, 2u);
  EXPECT_THAT(store_->TiersOf(Key(1)), ElementsAre(Tier::kRemote));
  EXPECT_THAT(store_->LocatePrefix(Keys(0, 6)),
              ElementsAre(Tier::kDisk, Tier::kRemote, Tier::kRemote, Tier::kHost, Tier::kHost));

  // One load crosses both lower tiers: each chunk comes from the tier that holds it.
  bool deferred = false;
  LoadLeases leased = Load(Keys(0, 3), deferred);
  EXPECT_TRUE(deferred);
  ASSERT_TRUE(leased.failure.ok()) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 3u);
  for (uint64_t id = 0; id < 3; ++id) EXPECT_TRUE(Holds(leased.leases[id], id)) << id;
  EXPECT_EQ(leased.promoted_chunks, 3u);
  leased.leases.clear();
  TieredStoreStats stats = store_->Stats();
  EXPECT_EQ(stats.lower[0].reads, 1u);
  EXPECT_EQ(stats.lower[1].reads, 2u);

  // A prefetch finds remote chunks too: chunk 1, dropped from the host tier, comes back from the
  // remote tier (a load leaves the copies below in place).
  ASSERT_TRUE(store_->Clear({.keys = absl::flat_hash_set<ChunkKey>{Key(1)}}, Tier::kHost).ok());
  ASSERT_THAT(store_->TiersOf(Key(1)), ElementsAre(Tier::kRemote));
  EXPECT_EQ(*store_->Prefetch(layout_, Keys(1, 1)), 1u);
  store_->Flush();
  EXPECT_THAT(store_->TiersOf(Key(1)), ElementsAre(Tier::kHost, Tier::kRemote));
  stats = store_->Stats();
  EXPECT_EQ(stats.movement.prefetch_promoted, 1u);
  EXPECT_EQ(stats.lower[1].reads, 3u);
}

TEST_F(TieredStoreTest, MoveAndClearNameAnyTier) {
  OpenThreeTiers();
  for (uint64_t id = 0; id < 3; ++id) Store(id);
  ASSERT_EQ(store_->Move(Keys(0, 3), Tier::kRemote, nullptr)->moved_chunks, 3u);
  EXPECT_EQ(store_->Move(Keys(0, 3), Tier::kRemote, nullptr)->already_in_target, 3u);

  // Remote to disk: through the host tier; the remote copy stays, the host copy goes.
  EXPECT_EQ(store_->Move(Keys(0, 1), Tier::kDisk, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "moving out of a lower tier needs the layout";
  absl::StatusOr<MoveResult> moved = store_->Move(Keys(0, 1), Tier::kDisk, &layout_);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->moved_chunks, 1u);
  EXPECT_THAT(store_->TiersOf(Key(0)), ElementsAre(Tier::kDisk, Tier::kRemote));

  // Up: promoted from the nearest tier holding it, then out of every tier below.
  const uint64_t remote_reads = store_->Stats().lower[1].reads;
  moved = store_->Move(Keys(0, 2), Tier::kHost, &layout_);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->moved_chunks, 2u);
  EXPECT_THAT(store_->TiersOf(Key(0)), ElementsAre(Tier::kHost));
  EXPECT_THAT(store_->TiersOf(Key(1)), ElementsAre(Tier::kHost));
  // Chunk 0 came from the disk tier, the nearest holding it; chunk 1 from the remote tier.
  EXPECT_EQ(store_->Stats().lower[1].reads, remote_reads + 1);
  bool deferred = true;
  LoadLeases leased = Load(Keys(0, 2), deferred);
  EXPECT_FALSE(deferred);
  ASSERT_EQ(leased.leases.size(), 2u);
  EXPECT_TRUE(Holds(leased.leases[0], 0));
  EXPECT_TRUE(Holds(leased.leases[1], 1));
  leased.leases.clear();

  // Clear of one tier leaves the others.
  ASSERT_EQ(*store_->FlushToLowerTiers(), 2u);  // 0 and 1 to disk, the nearest
  absl::StatusOr<RemoveResult> removed = store_->Clear({}, Tier::kRemote);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->chunks, 1u);  // chunk 2
  EXPECT_TRUE(store_->TiersOf(Key(2)).empty());
  EXPECT_THAT(store_->TiersOf(Key(0)), ElementsAre(Tier::kHost, Tier::kDisk));
  removed = store_->Clear({}, std::nullopt);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->chunks, 4u);  // 0 and 1 in the host and disk tiers
  for (const Tier tier : {Tier::kHost, Tier::kDisk, Tier::kRemote}) {
    EXPECT_EQ(store_->Move(Keys(0, 3), tier, &layout_)->missing_chunks, 3u) << TierName(tier);
  }
}

}  // namespace
}  // namespace strata::storage
