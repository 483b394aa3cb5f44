// Store / evict / remove churn through the whole tier with LRU eviction and mixed chunk sizes.
// Built twice: 50K operations in the unit suite, 1M (STRATA_CHURN_OPERATIONS) as a slow test.
#include <cstdio>
#include <random>

#include "gtest/gtest.h"
#include "storage/host/host_tier.h"
#include "storage/host/test_util.h"

#ifndef STRATA_CHURN_OPERATIONS
#define STRATA_CHURN_OPERATIONS 50000
#endif

namespace strata::storage {
namespace {

TEST(HostTierChurn, KeepsTheArenaFullAndConsistent) {
  constexpr uint32_t kPage = 1024;
  constexpr uint32_t kPages = 1024;
  constexpr uint32_t kMaxChunkPages = 4;  // a full SmallLayout chunk
  constexpr int kOperations = STRATA_CHURN_OPERATIONS;
  const KvLayout layout = testing::SmallLayout();
  ManualClock clock;
  auto created =
      HostTier::Create({.capacity_bytes = kPages * kPage, .page_bytes = kPage, .clock = &clock});
  ASSERT_TRUE(created.ok()) << created.status();
  HostTier& tier = **created;

  std::mt19937_64 rng(7);
  uint64_t next_id = 0, evicting_stores = 0, extents = 0, stores = 0, loads = 0;
  double payload_utilisation_sum = 0, page_utilisation_sum = 0, page_utilisation_min = 1;
  for (int op = 0; op < kOperations; ++op) {
    const uint64_t dice = rng() % 16;
    if (dice == 0 && next_id > 0) {  // remove a recent chunk
      ASSERT_TRUE(tier.Remove(testing::SyntheticKey(
                                  layout, next_id - 1 - rng() % std::min<uint64_t>(next_id, 64)))
                      .ok());
      continue;
    }
    if (dice <= 3 && next_id > 0) {  // load a recent chunk, if still cached
      const uint64_t id = next_id - 1 - rng() % std::min<uint64_t>(next_id, 256);
      auto lease = tier.Acquire(testing::SyntheticKey(layout, id));
      ASSERT_TRUE(lease.ok()) << lease.status();
      if (lease->has_value()) {
        ++loads;
        ASSERT_EQ((*lease)->checksum(),
                  ChecksumBytes(testing::Pattern(id, (*lease)->size_bytes())));
      }
      continue;
    }
    const uint64_t evictions_before = tier.Stats().evictions;
    const uint64_t id = next_id++;
    // Three in four chunks are full; the rest are partial last chunks.
    const uint32_t tokens = rng() % 4 != 0 ? 16 : 1 + rng() % 15;
    auto reserved = tier.Reserve(layout, testing::SyntheticKey(layout, id), {.num_tokens = tokens});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    WriteReservation& reservation = reserved->reservation;
    reservation.payload().CopyFrom(testing::Pattern(id, reservation.size_bytes()));
    extents += reservation.ranges().size();
    ++stores;
    ASSERT_TRUE(tier.Commit(std::move(reservation)).ok());
    const HostTierStats stats = tier.Stats();
    if (stats.evictions > evictions_before) {
      ++evicting_stores;
      const double pages = double(stats.used_bytes) / stats.capacity_bytes;
      page_utilisation_sum += pages;
      page_utilisation_min = std::min(page_utilisation_min, pages);
      payload_utilisation_sum += double(stats.payload_bytes) / stats.capacity_bytes;
    }
  }
  absl::Status consistent = tier.CheckConsistency();
  ASSERT_TRUE(consistent.ok()) << consistent;
  const HostTierStats stats = tier.Stats();
  std::printf(
      "host tier churn: %d ops (%lu stores, %lu loads, %lu removed, %lu evicted); after stores "
      "that evicted: page utilisation mean %.4f min %.4f, payload utilisation mean %.4f; extents "
      "per chunk mean %.2f\n",
      kOperations, stores, loads, stats.removed, stats.evictions,
      page_utilisation_sum / evicting_stores, page_utilisation_min,
      payload_utilisation_sum / evicting_stores, double(extents) / stores);
  ASSERT_GT(evicting_stores, uint64_t(kOperations) / 4);
  // A store evicts only what it needs and never finds the free pages unusable.
  EXPECT_GE(page_utilisation_min, 1.0 - double(kMaxChunkPages) / kPages);
  // Page rounding of partial chunks is the only other loss: under 1 page in 4 chunks.
  EXPECT_GE(payload_utilisation_sum / evicting_stores, 0.85);
  EXPECT_EQ(stats.used_bytes + stats.free_bytes, stats.capacity_bytes);
}

}  // namespace
}  // namespace strata::storage
