#include "storage/disk/demoter.h"

#include <cstring>

#include "storage/disk/disk_tier_test_util.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;
using testing::Pattern;
using testing::SmallLayout;
using testing::SyntheticKey;

using DemoterTest = DiskTierTest;

constexpr uint64_t kChunkBytes = 4096;  // SmallLayout: 16 tokens x 256 bytes

class DemoterFixture {
 public:
  explicit DemoterFixture(DiskTier* disk) : demoter(disk) {}

  absl::Status Open() {
    auto host = HostTier::Create({.capacity_bytes = 4 * kChunkBytes,
                                  .page_bytes = 4096,
                                  .arena_name = "strata-demoter-test",
                                  .listener = &demoter});
    if (!host.ok()) return host.status();
    tier = std::move(host).value();
    return absl::OkStatus();
  }

  absl::Status Store(uint64_t id) {
    auto reserved = tier->Reserve(layout, SyntheticKey(layout, id), {.num_tokens = 16});
    if (!reserved.ok()) return reserved.status();
    reserved->reservation.payload().CopyFrom(Pattern(id, kChunkBytes));
    return tier->Commit(std::move(reserved->reservation));
  }

  bool HostHolds(uint64_t id) {
    auto lease = tier->Acquire(SyntheticKey(layout, id));
    if (!lease.ok() || !lease->has_value()) return false;
    std::vector<std::byte> bytes(kChunkBytes);
    (*lease)->payload().CopyTo(bytes);
    return bytes == Pattern(id, kChunkBytes);
  }

  KvLayout layout = SmallLayout();
  DiskDemoter demoter;
  std::unique_ptr<HostTier> tier;
};

TEST_P(DemoterTest, EvictedHostChunksLandOnDiskAndPromoteBack) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get());
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  EXPECT_EQ(host.demoter.demoted(), 6u);
  EXPECT_EQ(host.demoter.failed(), 0u);
  for (uint64_t id = 0; id < 6; ++id) {
    const ChunkKey key = SyntheticKey(host.layout, id);
    ASSERT_TRUE((*disk)->Contains(key)) << id;
    AlignedBuffer bytes(kChunkBytes);
    ASSERT_TRUE((*disk)->Read(key, bytes.span()).ok());
    EXPECT_EQ(std::memcmp(bytes.data(), Pattern(id, kChunkBytes).data(), kChunkBytes), 0) << id;
    EXPECT_EQ((*disk)->Lookup(key)->num_tokens, 16u);
  }

  // Promotion reads the disk record into the arena pages; making room demotes another chunk.
  auto outcome = PromoteFromDisk(**disk, *host.tier, host.layout, SyntheticKey(host.layout, 2));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, PromoteOutcome::kPromoted);
  EXPECT_TRUE(host.HostHolds(2));
  EXPECT_EQ(host.demoter.demoted(), 7u);
  // Arena pages are 4 KiB aligned: demotion and promotion moved the bytes in place.
  EXPECT_EQ((*disk)->stats().staged_writes, 0u);
  EXPECT_EQ((*disk)->stats().staged_reads, 0u);
  EXPECT_EQ(PromoteFromDisk(**disk, *host.tier, host.layout, SyntheticKey(host.layout, 2)).value(),
            PromoteOutcome::kAlreadyInHost);
  EXPECT_EQ(
      PromoteFromDisk(**disk, *host.tier, host.layout, SyntheticKey(host.layout, 999)).value(),
      PromoteOutcome::kNotOnDisk);
  EXPECT_TRUE(host.tier->CheckConsistency().ok());
}

TEST_P(DemoterTest, CorruptDiskCopyIsDataLossAndLeavesNoHostReservation) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get());
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  ASSERT_TRUE((*disk)->Contains(SyntheticKey(host.layout, 0)));
  plan_->FlipNextReads(1);
  auto outcome = PromoteFromDisk(**disk, *host.tier, host.layout, SyntheticKey(host.layout, 0));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE((*disk)->Contains(SyntheticKey(host.layout, 0)));
  EXPECT_FALSE(host.tier->Contains(SyntheticKey(host.layout, 0)));
  EXPECT_EQ(host.tier->Stats().reservations, 0u);
  EXPECT_TRUE(host.tier->CheckConsistency().ok());
}

INSTANTIATE_TEST_SUITE_P(Engines, DemoterTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::storage
