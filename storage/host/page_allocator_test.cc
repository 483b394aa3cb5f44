#include "storage/host/page_allocator.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"

// The unit suite runs a short churn; the slow suite builds this file again with 1M operations.
#ifndef STRATA_CHURN_OPERATIONS
#define STRATA_CHURN_OPERATIONS 50000
#endif

namespace strata::storage {
namespace {

uint32_t Total(const ExtentList& extents) {
  uint32_t pages = 0;
  for (const Extent& extent : extents) pages += extent.num_pages;
  return pages;
}

// Free runs plus `held` must tile [0, num_pages) exactly: no page lost, none held twice.
void ExpectTiles(const PageAllocator& allocator, const std::vector<ExtentList>& held) {
  std::vector<Extent> all = allocator.FreeRunsForTesting();
  for (const ExtentList& extents : held) all.insert(all.end(), extents.begin(), extents.end());
  std::sort(all.begin(), all.end(),
            [](const Extent& a, const Extent& b) { return a.first_page < b.first_page; });
  uint64_t next = 0;
  for (const Extent& extent : all) {
    ASSERT_EQ(extent.first_page, next);
    ASSERT_GT(extent.num_pages, 0u);
    next = extent.end_page();
  }
  EXPECT_EQ(next, allocator.num_pages());
}

TEST(PageAllocator, AllocatesContiguouslyWhenEmpty) {
  PageAllocator allocator(100);
  auto a = allocator.Allocate(10);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 1u);
  EXPECT_EQ(Total(*a), 10u);
  EXPECT_EQ(allocator.free_pages(), 90u);
  EXPECT_EQ(allocator.used_pages(), 10u);
  allocator.Free(*a);
  EXPECT_EQ(allocator.free_pages(), 100u);
  EXPECT_EQ(allocator.free_runs(), 1u);
}

TEST(PageAllocator, BestFitPicksTheSmallestRunThatHolds) {
  PageAllocator allocator(30);
  auto a = *allocator.Allocate(5);
  auto b = *allocator.Allocate(3);
  auto c = *allocator.Allocate(10);
  auto d = *allocator.Allocate(2);
  // Free runs now: a (5), c (10), and the tail (10).
  allocator.Free(a);
  allocator.Free(c);
  EXPECT_EQ(allocator.free_runs(), 3u);
  auto e = *allocator.Allocate(4);
  ASSERT_EQ(e.size(), 1u);
  // Carved from a's run (5 pages), the smallest that holds 4.
  EXPECT_GE(e[0].first_page, a[0].first_page);
  EXPECT_LE(e[0].end_page(), a[0].end_page());
  ExpectTiles(allocator, {b, d, e});
}

TEST(PageAllocator, SplitsAcrossLargestRunsWhenNoRunHolds) {
  PageAllocator allocator(20);
  std::vector<ExtentList> chunks;
  for (int i = 0; i < 10; ++i) chunks.push_back(*allocator.Allocate(2));
  // Free every other chunk: five 2-page holes, none adjacent.
  std::vector<ExtentList> held;
  for (int i = 0; i < 10; ++i) {
    if (i % 2 == 0) {
      allocator.Free(chunks[i]);
    } else {
      held.push_back(chunks[i]);
    }
  }
  EXPECT_EQ(allocator.free_runs(), 5u);
  EXPECT_EQ(allocator.largest_free_run(), 2u);
  auto big = allocator.Allocate(9);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(Total(*big), 9u);
  EXPECT_EQ(big->size(), 5u);
  EXPECT_EQ(allocator.free_pages(), 1u);
  held.push_back(*big);
  ExpectTiles(allocator, held);
}

TEST(PageAllocator, CoalescesNeighboursOnFree) {
  PageAllocator allocator(12);
  auto a = *allocator.Allocate(4);
  auto b = *allocator.Allocate(4);
  auto c = *allocator.Allocate(4);
  allocator.Free(a);
  allocator.Free(c);
  EXPECT_EQ(allocator.free_runs(), 2u);
  allocator.Free(b);
  EXPECT_EQ(allocator.free_runs(), 1u);
  EXPECT_EQ(allocator.largest_free_run(), 12u);
}

TEST(PageAllocator, RejectsZeroAndTooMany) {
  PageAllocator allocator(8);
  EXPECT_EQ(allocator.Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
  auto a = *allocator.Allocate(6);
  EXPECT_EQ(allocator.Allocate(3).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(allocator.free_pages(), 2u);  // nothing was taken by the failed call
  ExpectTiles(allocator, {a});
}

TEST(PageAllocatorDeathTest, DoubleFreeAborts) {
  PageAllocator allocator(8);
  auto a = *allocator.Allocate(4);
  allocator.Free(a);
  EXPECT_DEATH(allocator.Free(a), "double free");
  EXPECT_DEATH(allocator.Free(std::vector<Extent>{{6, 4}}), "outside the arena");
}

struct ChurnReport {
  uint64_t allocations = 0;
  uint64_t refusals = 0;
  double mean_refusal_utilisation = 0;
  double min_refusal_utilisation = 1;
  double mean_extents = 0;
  uint64_t max_extents = 0;
};

// Store/evict churn: `operations` stores (7 in 8) and removals (1 in 8) of chunks sized by
// `chunk_pages`; when a store does not fit, random chunks are evicted until it does (eviction
// order is unrelated to placement, as with LRU). Allocation may split a chunk, so a store only
// ever waits for enough free pages in total.
template <typename SizeFn>
ChurnReport Churn(uint32_t num_pages, int operations, SizeFn chunk_pages) {
  PageAllocator allocator(num_pages);
  std::mt19937_64 rng(42);
  std::vector<ExtentList> held;
  ChurnReport report;
  double refusal_utilisation_sum = 0;
  uint64_t extents_total = 0;
  auto evict_random = [&] {
    const size_t victim = rng() % held.size();
    allocator.Free(held[victim]);
    held[victim] = std::move(held.back());
    held.pop_back();
  };
  for (int op = 0; op < operations; ++op) {
    if (!held.empty() && rng() % 8 == 0) {
      evict_random();
      continue;
    }
    const uint32_t pages = chunk_pages(rng);
    while (allocator.free_pages() < pages) {
      const double utilisation = double(allocator.used_pages()) / num_pages;
      refusal_utilisation_sum += utilisation;
      report.min_refusal_utilisation = std::min(report.min_refusal_utilisation, utilisation);
      ++report.refusals;
      evict_random();
    }
    auto extents = allocator.Allocate(pages);
    EXPECT_TRUE(extents.ok()) << extents.status();
    if (!extents.ok()) return report;
    EXPECT_EQ(Total(*extents), pages);
    ++report.allocations;
    extents_total += extents->size();
    report.max_extents = std::max<uint64_t>(report.max_extents, extents->size());
    held.push_back(*std::move(extents));
  }
  ExpectTiles(allocator, held);
  report.mean_refusal_utilisation =
      refusal_utilisation_sum / std::max<uint64_t>(report.refusals, 1);
  report.mean_extents = double(extents_total) / std::max<uint64_t>(report.allocations, 1);
  std::printf(
      "page allocator churn: %d ops over %u pages, %lu allocations, %lu refusals; utilisation "
      "when a store had to evict: mean %.4f, min %.4f; extents per chunk: mean %.2f, max %lu; "
      "free runs at the end %zu\n",
      operations, num_pages, report.allocations, report.refusals, report.mean_refusal_utilisation,
      report.min_refusal_utilisation, report.mean_extents, report.max_extents,
      allocator.free_runs());
  return report;
}

// The tier's workload: mostly full chunks (16 pages, e.g. 32 MiB in 2 MiB pages) and some
// partial last chunks of a prompt.
TEST(PageAllocator, ChurnOfChunkSizedStoresDoesNotFragment) {
  constexpr uint32_t kPages = 1 << 16;
  constexpr int kOperations = STRATA_CHURN_OPERATIONS;
  const ChurnReport report = Churn(kPages, kOperations, [](std::mt19937_64& rng) -> uint32_t {
    return rng() % 4 != 0 ? 16 : 1 + rng() % 16;
  });
  ASSERT_GT(report.refusals, uint64_t{kOperations} / 4);
  EXPECT_GE(report.min_refusal_utilisation, 1.0 - 16.0 / kPages);
  // Random eviction near full scatters the free pages (LRU evicts chunks stored around the same
  // time, which is kinder); chunks then span several extents, each still whole pages.
  EXPECT_LE(report.mean_extents, 8.0);
}

// Adversarial sizes (uniform 1..64 pages): free space ends up in small holes, so chunks are
// split into more extents, but a store still never fails while enough pages are free.
TEST(PageAllocator, ChurnOfRandomSizesNeverRefusesWhileSpaceIsFree) {
  constexpr uint32_t kPages = 1 << 14;
  constexpr int kOperations = STRATA_CHURN_OPERATIONS / 5;
  const ChurnReport report =
      Churn(kPages, kOperations, [](std::mt19937_64& rng) -> uint32_t { return 1 + rng() % 64; });
  ASSERT_GT(report.refusals, uint64_t{kOperations} / 4);
  EXPECT_GE(report.min_refusal_utilisation, 1.0 - 64.0 / kPages);
  EXPECT_LE(report.max_extents, 64u);
}

}  // namespace
}  // namespace strata::storage
