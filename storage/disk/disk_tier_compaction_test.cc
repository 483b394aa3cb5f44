// DiskTier::Compact while other threads read.
#include <atomic>
#include <thread>
#include <vector>

#include "storage/disk/testing/disk_tier_test_util.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;
using testing::KeyOf;
using testing::PutChunk;
using testing::ReadChunk;

using DiskTierCompactionTest = DiskTierTest;

constexpr uint64_t kSize = 60000;  // 64 KiB records, 16 per 1 MiB segment

TEST_P(DiskTierCompactionTest, CompactsMostlyDeadSegmentsWhileReadsGoOn) {
  auto opened = OpenTier();
  ASSERT_TRUE(opened.ok()) << opened.status();
  DiskTier& tier = **opened;
  constexpr uint64_t kChunks = 96;
  for (uint64_t id = 0; id < kChunks; ++id) ASSERT_TRUE(PutChunk(tier, id, kSize).ok()) << id;
  // Keep every fourth chunk.
  for (uint64_t id = 0; id < kChunks; ++id) {
    if (id % 4 != 0) {
      ASSERT_TRUE(tier.Remove(KeyOf(id)).value());
    }
  }
  const DiskTierStats before = tier.stats();

  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  std::atomic<int> reads{0};
  std::vector<std::jthread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      for (uint64_t i = r; !stop.load(); i += 4) {
        const uint64_t id = (i % kChunks) / 4 * 4;
        if (!ReadChunk(tier, id, kSize).ok()) failures.fetch_add(1);
        reads.fetch_add(1);
      }
    });
  }
  auto deleted = tier.Compact(0.5);
  while (reads.load() < 200) std::this_thread::yield();
  stop = true;
  readers.clear();
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(failures.load(), 0);

  const DiskTierStats after = tier.stats();
  EXPECT_GE(*deleted, 4);
  EXPECT_EQ(after.compacted_segments, static_cast<uint64_t>(*deleted));
  EXPECT_LE(after.disk_bytes, before.disk_bytes / 2);
  EXPECT_EQ(after.chunks, kChunks / 4);
  EXPECT_LE(SegmentFileBytes(), after.disk_bytes);
  for (uint64_t id = 0; id < kChunks; id += 4) EXPECT_TRUE(ReadChunk(tier, id, kSize).ok()) << id;

  // The moved chunks are where the index says after a restart.
  opened->reset();
  auto reopened = OpenTier();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*reopened)->stats().chunks, kChunks / 4);
  for (uint64_t id = 0; id < kChunks; id += 4) {
    EXPECT_TRUE(ReadChunk(**reopened, id, kSize).ok()) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, DiskTierCompactionTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::storage
