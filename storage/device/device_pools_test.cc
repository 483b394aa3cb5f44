#include "storage/device/device_pools.h"

#include <string>

#include "gtest/gtest.h"
#include "storage/device/host_runtime.h"
#include "tests/support/test_layout.h"

namespace strata::storage {
namespace {

KvLayout Layout(std::string model, uint32_t tp_rank = 0) {
  KvLayout layout =
      test_support::SmallLayout({.model_id = model, .head_dim = 32, .chunk_tokens = 64});
  layout.tp_rank = tp_rank;
  layout.tp_world_size = 2;
  return layout;
}

TEST(DevicePoolsTest, EachLayoutGetsItsOwnPoolOfTheConfiguredSize) {
  HostRuntime runtime;
  // A page of every layer of a 16-token block of Layout(): 2 layers x 4 KiB.
  DevicePools pools(runtime, {.bytes_per_layout = 10 * 8192 + 100, .block_tokens = 16});
  auto first = pools.ForLayout(Layout("a"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)->geometry().num_pages, 10u);
  EXPECT_EQ((*first)->geometry().page_bytes, 4096u);
  auto again = pools.ForLayout(Layout("a"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  auto other_rank = pools.ForLayout(Layout("a", 1));
  ASSERT_TRUE(other_rank.ok());
  EXPECT_NE(*other_rank, *first);
  ASSERT_TRUE((*first)
                  ->Reserve(ChunkKey::FromParts(
                                HashAlgorithm::kXxh3_128, KeyNamespace::kPositionIndependent,
                                Layout("a").Fingerprint(), std::vector<uint8_t>(16, 1)),
                            3, 1)
                  .ok());
  const std::vector<LayoutPoolStats> stats = pools.Stats();
  ASSERT_EQ(stats.size(), 2u);
  uint64_t free_pages = 0;
  for (const LayoutPoolStats& s : stats) {
    EXPECT_EQ(s.model_id, "a");
    EXPECT_EQ(s.pool.capacity_pages, 10u);
    free_pages += s.pool.free_pages;
  }
  EXPECT_EQ(free_pages, 17u);
}

TEST(DevicePoolsTest, ALayoutThatCannotHaveAPoolIsRefusedOnceAndForAll) {
  HostRuntime runtime;
  DevicePools small(runtime, {.bytes_per_layout = 8191, .block_tokens = 16});
  const absl::Status too_small = small.ForLayout(Layout("a")).status();
  EXPECT_EQ(too_small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_small.ToString().find("hold 0 pages"), std::string::npos) << too_small;
  EXPECT_EQ(small.ForLayout(Layout("a")).status(), too_small);
  EXPECT_TRUE(small.Stats().empty());

  DevicePools odd_blocks(runtime, {.bytes_per_layout = 1 << 20, .block_tokens = 48});
  EXPECT_EQ(odd_blocks.ForLayout(Layout("a")).status().code(),
            absl::StatusCode::kInvalidArgument);  // 48 does not divide 64-token chunks
}

}  // namespace
}  // namespace strata::storage
