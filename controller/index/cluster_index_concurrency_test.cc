// Lookups racing every writer of the cluster index: ingest that grows and shrinks the shards and
// moves holders between inline words and blocks, removals, clears, drops, re-registrations and
// sweeps. Run under TSan too (make test-tsan's configuration).
#include <array>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "controller/index/cluster_index.h"
#include "gtest/gtest.h"

namespace strata::controller {
namespace {

constexpr size_t kChainLength = 48;
constexpr int kWriters = 6;

ChunkKey Key(uint64_t chain, uint64_t i) {
  std::array<uint8_t, 16> digest{};
  uint64_t x = (chain << 20 | i) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  std::memcpy(digest.data(), &x, sizeof(x));
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, 7, digest);
}

std::vector<ChunkKey> Chain(uint64_t chain, size_t length) {
  std::vector<ChunkKey> keys;
  for (size_t i = 0; i < length; ++i) keys.push_back(Key(chain, i));
  return keys;
}

std::vector<ChunkEvent> Events(uint64_t chain, size_t length, ChunkEventKind kind, Tier tier) {
  std::vector<ChunkEvent> events;
  for (size_t i = 0; i < length; ++i)
    events.push_back({.kind = kind, .tier = tier, .key = Key(chain, i)});
  return events;
}

// Checks one answer for the anchor's chain: the anchor (never written to after the start) is
// always there in full, and every row is well formed.
void CheckAnswer(const std::vector<InstanceChainHit>& hits) {
  bool anchor_seen = false;
  for (size_t k = 0; k < hits.size(); ++k) {
    const InstanceChainHit& hit = hits[k];
    uint32_t counted = 0;
    for (const uint32_t n : hit.chunks_per_tier) counted += n;
    ASSERT_EQ(counted, hit.prefix_chunks) << hit.instance_id;
    ASSERT_GE(hit.prefix_chunks, 1u);
    ASSERT_LE(hit.prefix_chunks, kChainLength);
    if (k > 0) {
      ASSERT_GE(hits[k - 1].prefix_chunks, hit.prefix_chunks);
    }
    if (hit.instance_id == "anchor") {
      anchor_seen = true;
      ASSERT_EQ(hit.prefix_chunks, kChainLength);
      ASSERT_EQ(hit.chunks_per_tier[static_cast<size_t>(Tier::kHost)], kChainLength);
    } else {
      ASSERT_TRUE(hit.instance_id.starts_with("w")) << hit.instance_id;
    }
  }
  ASSERT_TRUE(anchor_seen);
}

TEST(ClusterIndexConcurrencyTest, LookupsRaceIngestDropsClearsAndSweeps) {
  // Few shards, so that every shard grows, shrinks and is swept while lookups read it.
  std::unique_ptr<ClusterIndex> index =
      *ClusterIndex::Create({.max_instances = 16, .shard_count = 4});
  ASSERT_TRUE(index->RegisterInstance("anchor").ok());
  ASSERT_TRUE(
      index->Ingest("anchor", Events(0, kChainLength, ChunkEventKind::kStored, Tier::kHost)).ok());

  std::atomic<uint64_t> lookups{0};
  std::vector<std::jthread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&](std::stop_token stop) {
      const std::vector<ChunkKey> chain = Chain(0, kChainLength);
      while (!stop.stop_requested()) {
        CheckAnswer(index->LookupChain(chain));
        if (::testing::Test::HasFatalFailure()) return;
        lookups.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }

  for (int round = 0; round < 300; ++round) {
    const std::string id = absl::StrCat("w", round % kWriters);
    (void)index->RegisterInstance(id);  // FAILED_PRECONDITION when still registered
    // The anchor's chain gains up to kWriters + 1 holders: its words move to blocks and back.
    ASSERT_TRUE(
        index->Ingest(id, Events(0, kChainLength - round % 7, ChunkEventKind::kStored, Tier::kDisk))
            .ok());
    // Other chains grow the shards.
    for (uint64_t chain = 1; chain <= 8; ++chain) {
      ASSERT_TRUE(index
                      ->Ingest(id, Events(round * 8 + chain, kChainLength, ChunkEventKind::kStored,
                                          Tier::kHost))
                      .ok());
    }
    switch (round % 4) {
      case 0:
        ASSERT_TRUE(
            index->Ingest(id, Events(0, kChainLength / 2, ChunkEventKind::kRemoved, Tier::kDisk))
                .ok());
        break;
      case 1:
        ASSERT_TRUE(
            index->Ingest(id, std::vector<ChunkEvent>{{.kind = ChunkEventKind::kCleared}}).ok());
        break;
      case 2:
        ASSERT_TRUE(index->DropInstance(id).ok());
        break;
      default:
        break;
    }
    index->Sweep(512);
  }
  for (int w = 0; w < kWriters; ++w) (void)index->DropInstance(absl::StrCat("w", w));
  while (!index->Sweep(UINT64_MAX).pass_completed) {
  }
  index->Sweep(UINT64_MAX);  // a whole pass: every stale entry is gone, every shard shrunk
  for (std::jthread& reader : readers) {
    reader.request_stop();
    reader.join();
  }
  EXPECT_GT(lookups.load(), 0u);
  const ClusterIndexStats stats = index->stats();
  EXPECT_EQ(stats.stale_entries, 0u);
  EXPECT_EQ(stats.live_entries, kChainLength);
  EXPECT_EQ(stats.chunks, kChainLength);
  CheckAnswer(index->LookupChain(Chain(0, kChainLength)));
}

}  // namespace
}  // namespace strata::controller
