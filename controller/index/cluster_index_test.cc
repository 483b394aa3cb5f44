#include "controller/index/cluster_index.h"

#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::controller {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr uint64_t kFingerprint = 0x5eed;

// Distinct, uniformly spread digests for chain `chain`, chunk `i`.
ChunkKey Key(uint64_t chain, uint64_t i) {
  std::array<uint8_t, 16> digest{};
  uint64_t x = (chain << 20 | i) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  std::memcpy(digest.data(), &x, sizeof(x));
  std::memcpy(digest.data() + 8, &chain, sizeof(chain));
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, kFingerprint, digest);
}

std::vector<ChunkKey> Chain(uint64_t chain, size_t length) {
  std::vector<ChunkKey> keys;
  for (size_t i = 0; i < length; ++i) keys.push_back(Key(chain, i));
  return keys;
}

ChunkEvent Stored(const ChunkKey& key, Tier tier) {
  return {.kind = ChunkEventKind::kStored, .tier = tier, .key = key};
}
ChunkEvent Removed(const ChunkKey& key, Tier tier) {
  return {.kind = ChunkEventKind::kRemoved, .tier = tier, .key = key};
}
ChunkEvent Cleared() { return {.kind = ChunkEventKind::kCleared}; }

// Stores chunks [0, length) of `chain` in `tier`.
std::vector<ChunkEvent> StoreChain(uint64_t chain, size_t length, Tier tier) {
  std::vector<ChunkEvent> events;
  for (size_t i = 0; i < length; ++i) events.push_back(Stored(Key(chain, i), tier));
  return events;
}

std::array<uint32_t, kTierCount> PerTier(uint32_t device, uint32_t host, uint32_t disk,
                                         uint32_t remote) {
  return {device, host, disk, remote};
}

MATCHER_P3(IsHit, id, prefix, per_tier, "") {
  return arg.instance_id == id && arg.prefix_chunks == static_cast<uint32_t>(prefix) &&
         arg.chunks_per_tier == per_tier;
}

class ClusterIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A few shards, so that the sweep's steps are visible.
    index_ = *ClusterIndex::Create({.max_instances = 1024, .shard_count = 4});
  }
  std::unique_ptr<ClusterIndex> index_;
};

TEST(ClusterIndexCreateTest, RejectsOptionsOutOfRange) {
  EXPECT_EQ(ClusterIndex::Create({.max_instances = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClusterIndex::Create({.max_instances = 70000}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClusterIndex::Create({.shard_count = 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClusterIndex::Create({.shard_count = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ClusterIndex::Create({.max_instances = 65536, .shard_count = 1}).ok());
}

TEST_F(ClusterIndexTest, RegistersAtLeast1024Instances) {
  for (int i = 0; i < 1024; ++i) {
    ASSERT_TRUE(index_->RegisterInstance(absl::StrCat("node-", i)).ok()) << i;
  }
  EXPECT_EQ(index_->RegisterInstance("one-too-many").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(index_->RegisterInstance("node-7").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index_->RegisterInstance("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(index_->stats().instances, 1024u);
}

TEST_F(ClusterIndexTest, StoredChunkIsReportedInItsFastestTier) {
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  const ChunkKey key = Key(1, 0);
  ASSERT_TRUE(index_->Ingest("a", std::vector{Stored(key, Tier::kDisk)}).ok());
  EXPECT_THAT(index_->LookupChain({&key, 1}), ElementsAre(IsHit("a", 1, PerTier(0, 0, 1, 0))));
  ASSERT_TRUE(index_->Ingest("a", std::vector{Stored(key, Tier::kHost)}).ok());
  EXPECT_THAT(index_->LookupChain({&key, 1}), ElementsAre(IsHit("a", 1, PerTier(0, 1, 0, 0))));
  // One (chunk, instance) entry, whatever the number of tiers.
  EXPECT_EQ(index_->stats().live_entries, 1u);
  EXPECT_EQ(index_->stats().chunks, 1u);
}

TEST_F(ClusterIndexTest, RemovingATierKeepsTheOtherTier) {
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  const ChunkKey key = Key(1, 0);
  ASSERT_TRUE(
      index_->Ingest("a", std::vector{Stored(key, Tier::kHost), Stored(key, Tier::kDisk)}).ok());
  ASSERT_TRUE(index_->Ingest("a", std::vector{Removed(key, Tier::kHost)}).ok());
  EXPECT_THAT(index_->LookupChain({&key, 1}), ElementsAre(IsHit("a", 1, PerTier(0, 0, 1, 0))));
  ASSERT_TRUE(index_->Ingest("a", std::vector{Removed(key, Tier::kDisk)}).ok());
  EXPECT_THAT(index_->LookupChain({&key, 1}), IsEmpty());
  EXPECT_EQ(index_->stats().live_entries, 0u);
  EXPECT_EQ(index_->stats().chunks, 0u);
}

TEST_F(ClusterIndexTest, RemovingWhatIsNotIndexedIsNotAnError) {
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  ASSERT_TRUE(index_->RegisterInstance("b").ok());
  const ChunkKey key = Key(1, 0);
  ASSERT_TRUE(index_->Ingest("a", std::vector{Removed(key, Tier::kHost)}).ok());
  ASSERT_TRUE(index_->Ingest("a", std::vector{Stored(key, Tier::kHost)}).ok());
  ASSERT_TRUE(index_->Ingest("b", std::vector{Removed(key, Tier::kHost)}).ok());
  ASSERT_TRUE(index_->Ingest("a", std::vector{Removed(key, Tier::kDisk)}).ok());
  EXPECT_THAT(index_->LookupChain({&key, 1}), ElementsAre(IsHit("a", 1, PerTier(0, 1, 0, 0))));
}

TEST_F(ClusterIndexTest, ChainLookupReportsEachInstancesPrefixAndTiers) {
  for (const char* id : {"a", "b", "c", "d"}) ASSERT_TRUE(index_->RegisterInstance(id).ok());
  // a: the whole chain of 8 in host. b: 5 chunks, the first 2 on device, then disk.
  // c: chunks 1..7 but not 0 (no prefix). d: 3 chunks in remote, plus chunk 5 (after a gap).
  ASSERT_TRUE(index_->Ingest("a", StoreChain(9, 8, Tier::kHost)).ok());
  std::vector<ChunkEvent> b = StoreChain(9, 5, Tier::kDisk);
  b.push_back(Stored(Key(9, 0), Tier::kDevice));
  b.push_back(Stored(Key(9, 1), Tier::kDevice));
  ASSERT_TRUE(index_->Ingest("b", b).ok());
  std::vector<ChunkEvent> c = StoreChain(9, 8, Tier::kHost);
  c.erase(c.begin());
  ASSERT_TRUE(index_->Ingest("c", c).ok());
  std::vector<ChunkEvent> d = StoreChain(9, 3, Tier::kRemote);
  d.push_back(Stored(Key(9, 5), Tier::kHost));
  ASSERT_TRUE(index_->Ingest("d", d).ok());

  EXPECT_THAT(index_->LookupChain(Chain(9, 8)),
              ElementsAre(IsHit("a", 8, PerTier(0, 8, 0, 0)), IsHit("b", 5, PerTier(2, 0, 3, 0)),
                          IsHit("d", 3, PerTier(0, 0, 0, 3))));
  // A longer chain than anyone holds, and a shorter one.
  EXPECT_THAT(index_->LookupChain(Chain(9, 20)),
              ElementsAre(IsHit("a", 8, PerTier(0, 8, 0, 0)), IsHit("b", 5, PerTier(2, 0, 3, 0)),
                          IsHit("d", 3, PerTier(0, 0, 0, 3))));
  EXPECT_THAT(index_->LookupChain(Chain(9, 2)),
              ElementsAre(IsHit("a", 2, PerTier(0, 2, 0, 0)), IsHit("b", 2, PerTier(2, 0, 0, 0)),
                          IsHit("d", 2, PerTier(0, 0, 0, 2))));
  // Another chain: nobody.
  EXPECT_THAT(index_->LookupChain(Chain(10, 8)), IsEmpty());
}

TEST_F(ClusterIndexTest, EmptyKeysFindNothing) {
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  ASSERT_TRUE(index_->Ingest("a", StoreChain(1, 4, Tier::kHost)).ok());
  EXPECT_THAT(index_->LookupChain({}), IsEmpty());
  std::vector<ChunkKey> keys = Chain(1, 4);
  keys[0] = ChunkKey();
  EXPECT_THAT(index_->LookupChain(keys), IsEmpty());
  keys = Chain(1, 4);
  keys[2] = ChunkKey();  // the walk stops at an empty key
  EXPECT_THAT(index_->LookupChain(keys), ElementsAre(IsHit("a", 2, PerTier(0, 2, 0, 0))));
}

TEST_F(ClusterIndexTest, ClearedHidesTheInstancesChunksAndKeepsItRegistered) {
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  ASSERT_TRUE(index_->RegisterInstance("b").ok());
  ASSERT_TRUE(index_->Ingest("a", StoreChain(1, 4, Tier::kHost)).ok());
  ASSERT_TRUE(index_->Ingest("b", StoreChain(1, 4, Tier::kDisk)).ok());
  // Stored before the clear in the same batch: gone; after it: kept.
  std::vector<ChunkEvent> events = StoreChain(2, 4, Tier::kHost);
  events.push_back(Cleared());
  events.push_back(Stored(Key(1, 0), Tier::kDevice));
  ASSERT_TRUE(index_->Ingest("a", events).ok());
  EXPECT_THAT(index_->LookupChain(Chain(1, 4)),
              ElementsAre(IsHit("b", 4, PerTier(0, 0, 4, 0)), IsHit("a", 1, PerTier(1, 0, 0, 0))));
  EXPECT_THAT(index_->LookupChain(Chain(2, 4)), IsEmpty());
  const ClusterIndexStats stats = index_->stats();
  EXPECT_EQ(stats.instances, 2u);
  EXPECT_EQ(stats.live_entries, 5u);
  EXPECT_EQ(stats.stale_entries, 7u);  // chunk (1, 0) was rewritten: its stale holder is gone
}

TEST_F(ClusterIndexTest, DroppedInstanceVanishesImmediately) {
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  ASSERT_TRUE(index_->RegisterInstance("b").ok());
  ASSERT_TRUE(index_->Ingest("a", StoreChain(1, 8, Tier::kHost)).ok());
  ASSERT_TRUE(index_->Ingest("b", StoreChain(1, 2, Tier::kHost)).ok());
  ASSERT_TRUE(index_->DropInstance("a").ok());
  EXPECT_THAT(index_->LookupChain(Chain(1, 8)), ElementsAre(IsHit("b", 2, PerTier(0, 2, 0, 0))));
  const ClusterIndexStats stats = index_->stats();
  EXPECT_EQ(stats.instances, 1u);
  EXPECT_EQ(stats.live_entries, 2u);
  EXPECT_EQ(stats.stale_entries, 8u);  // reclaimed lazily
  EXPECT_EQ(index_->DropInstance("a").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index_->Ingest("a", StoreChain(1, 1, Tier::kHost)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ClusterIndexTest, ReregisteringADroppedIdDoesNotResurrectItsChunks) {
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  ASSERT_TRUE(index_->Ingest("a", StoreChain(1, 8, Tier::kHost)).ok());
  ASSERT_TRUE(index_->DropInstance("a").ok());
  ASSERT_TRUE(index_->RegisterInstance("a").ok());  // takes the same slot again
  EXPECT_THAT(index_->LookupChain(Chain(1, 8)), IsEmpty());
  ASSERT_TRUE(index_->Ingest("a", StoreChain(1, 3, Tier::kDisk)).ok());
  EXPECT_THAT(index_->LookupChain(Chain(1, 8)), ElementsAre(IsHit("a", 3, PerTier(0, 0, 3, 0))));
  EXPECT_EQ(index_->stats().live_entries, 3u);
}

TEST_F(ClusterIndexTest, ManyClearsBetweenSweepsNeverResurrectAChunk) {
  // 4096 generations wrap the 12-bit tag: the index must sweep before reusing one.
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  ASSERT_TRUE(index_->Ingest("a", StoreChain(1, 4, Tier::kHost)).ok());
  const std::vector<ChunkEvent> clear = {Cleared()};
  for (int i = 0; i < 5000; ++i) {
    ASSERT_TRUE(index_->Ingest("a", clear).ok());
    ASSERT_THAT(index_->LookupChain(Chain(1, 4)), IsEmpty()) << "after " << i + 1 << " clears";
  }
  EXPECT_EQ(index_->stats().stale_entries, 0u);  // the forced sweep reclaimed them
  EXPECT_EQ(index_->stats().chunks, 0u);
}

TEST_F(ClusterIndexTest, SweepReclaimsStaleEntriesAndMemory) {
  for (const char* id : {"a", "b"}) ASSERT_TRUE(index_->RegisterInstance(id).ok());
  // Enough chunks that the tables, not the fixed instance table, make most of the memory.
  constexpr uint64_t kChains = 256;
  for (uint64_t chain = 0; chain < kChains; ++chain) {
    ASSERT_TRUE(index_->Ingest("a", StoreChain(chain, 64, Tier::kHost)).ok());
  }
  ASSERT_TRUE(index_->Ingest("b", StoreChain(0, 64, Tier::kHost)).ok());
  const ClusterIndexStats before = index_->stats();
  EXPECT_EQ(before.live_entries, kChains * 64 + 64);
  EXPECT_EQ(before.chunks, kChains * 64);

  ASSERT_TRUE(index_->DropInstance("a").ok());
  // A small budget visits one shard (of 4) per call.
  const SweepResult first = index_->Sweep(1);
  EXPECT_GT(first.visited_chunks, 0u);
  EXPECT_GT(first.reclaimed_entries, 0u);
  EXPECT_FALSE(first.pass_completed);
  const ClusterIndexStats partial = index_->stats();
  EXPECT_LT(partial.stale_entries, kChains * 64);
  EXPECT_GT(partial.stale_entries, 0u);

  const SweepResult rest = index_->Sweep(UINT64_MAX);
  EXPECT_TRUE(rest.pass_completed);
  EXPECT_EQ(first.reclaimed_entries + rest.reclaimed_entries, kChains * 64);
  const ClusterIndexStats after = index_->stats();
  EXPECT_EQ(after.stale_entries, 0u);
  EXPECT_EQ(after.live_entries, 64u);
  EXPECT_EQ(after.chunks, 64u);  // b's chain stays
  EXPECT_LT(after.memory_bytes, before.memory_bytes / 4);
  EXPECT_THAT(index_->LookupChain(Chain(0, 64)), ElementsAre(IsHit("b", 64, PerTier(0, 64, 0, 0))));
}

TEST_F(ClusterIndexTest, WritingAChunkReclaimsItsStaleHolders) {
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  ASSERT_TRUE(index_->RegisterInstance("b").ok());
  ASSERT_TRUE(index_->Ingest("a", StoreChain(1, 4, Tier::kHost)).ok());
  ASSERT_TRUE(index_->DropInstance("a").ok());
  EXPECT_EQ(index_->stats().stale_entries, 4u);
  ASSERT_TRUE(index_->Ingest("b", StoreChain(1, 2, Tier::kHost)).ok());
  EXPECT_EQ(index_->stats().stale_entries, 2u);
  EXPECT_EQ(index_->stats().live_entries, 2u);
}

TEST_F(ClusterIndexTest, BadEventsAreRejectedAndNothingIsApplied) {
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  std::vector<ChunkEvent> events = StoreChain(1, 3, Tier::kHost);
  events.push_back(Stored(ChunkKey(), Tier::kHost));
  absl::Status status = index_->Ingest("a", events);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("event 3"));
  events.back() = Stored(Key(1, 3), static_cast<Tier>(7));
  EXPECT_EQ(index_->Ingest("a", events).code(), absl::StatusCode::kInvalidArgument);
  events.back() = ChunkEvent{.kind = static_cast<ChunkEventKind>(9), .key = Key(1, 3)};
  EXPECT_EQ(index_->Ingest("a", events).code(), absl::StatusCode::kInvalidArgument);
  status = index_->Ingest("nobody", StoreChain(1, 3, Tier::kHost));
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("nobody"));
  EXPECT_EQ(index_->stats().live_entries, 0u);
  EXPECT_EQ(index_->stats().chunks, 0u);
  EXPECT_TRUE(index_->Ingest("a", {}).ok());
}

TEST_F(ClusterIndexTest, KeysWithTheSameIndexKeyShareAnEntry) {
  // The documented collision behaviour: keys that differ only past the 8 digest bytes IndexKey
  // reads are one entry, so a holder of one is reported for the other (a false positive the
  // daemon's full-key check turns into a miss).
  std::array<uint8_t, 16> digest{};
  digest[0] = 0x42;
  const ChunkKey stored =
      ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, kFingerprint, digest);
  digest[15] = 0x01;
  const ChunkKey other =
      ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, kFingerprint, digest);
  ASSERT_NE(stored, other);
  ASSERT_EQ(ClusterIndex::IndexKey(stored), ClusterIndex::IndexKey(other));
  ASSERT_TRUE(index_->RegisterInstance("a").ok());
  ASSERT_TRUE(index_->Ingest("a", std::vector{Stored(stored, Tier::kHost)}).ok());
  EXPECT_THAT(index_->LookupChain({&other, 1}), ElementsAre(IsHit("a", 1, PerTier(0, 1, 0, 0))));
  // A different layout fingerprint is a different index key.
  const ChunkKey other_layout = ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix,
                                                    kFingerprint + 1, stored.digest());
  EXPECT_NE(ClusterIndex::IndexKey(stored), ClusterIndex::IndexKey(other_layout));
  EXPECT_THAT(index_->LookupChain({&other_layout, 1}), IsEmpty());
}

TEST_F(ClusterIndexTest, ChunkHeldByManyInstancesSpillsAndLooksUp) {
  std::vector<ChunkEvent> chain = StoreChain(1, 16, Tier::kHost);
  for (int i = 0; i < 100; ++i) {
    const std::string id = absl::StrCat("node-", i);
    ASSERT_TRUE(index_->RegisterInstance(id).ok());
    ASSERT_TRUE(index_->Ingest(id, std::span(chain).first(16 - i % 4)).ok());
  }
  const std::vector<InstanceChainHit> hits = index_->LookupChain(Chain(1, 16));
  ASSERT_EQ(hits.size(), 100u);
  EXPECT_EQ(hits.front().prefix_chunks, 16u);
  EXPECT_EQ(hits.back().prefix_chunks, 13u);
  ASSERT_TRUE(index_->DropInstance("node-0").ok());
  EXPECT_EQ(index_->LookupChain(Chain(1, 16)).size(), 99u);
  index_->Sweep(UINT64_MAX);
  EXPECT_EQ(index_->stats().stale_entries, 0u);
  EXPECT_EQ(index_->stats().live_entries, 99u * 16 - 25 * (0 + 1 + 2 + 3));
}

TEST_F(ClusterIndexTest, LookupsRunConcurrentlyWithIngestAndDrops) {
  ASSERT_TRUE(index_->RegisterInstance("reader-visible").ok());
  ASSERT_TRUE(index_->Ingest("reader-visible", StoreChain(1, 32, Tier::kHost)).ok());
  std::thread writer([&] {
    for (int round = 0; round < 200; ++round) {
      const std::string id = absl::StrCat("w", round % 3);
      (void)index_->RegisterInstance(id);
      EXPECT_TRUE(index_->Ingest(id, StoreChain(1, 16 + round % 16, Tier::kDisk)).ok());
      if (round % 2 == 1) {
        EXPECT_TRUE(index_->DropInstance(id).ok());
      }
      index_->Sweep(64);
    }
  });
  for (int i = 0; i < 2000; ++i) {
    const std::vector<InstanceChainHit> hits = index_->LookupChain(Chain(1, 32));
    ASSERT_FALSE(hits.empty());
    ASSERT_EQ(hits.front().instance_id, "reader-visible");
    ASSERT_EQ(hits.front().prefix_chunks, 32u);
  }
  writer.join();
}

}  // namespace
}  // namespace strata::controller
