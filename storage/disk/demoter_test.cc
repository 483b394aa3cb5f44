#include "storage/disk/demoter.h"

#include <cerrno>
#include <cstring>
#include <thread>

#include "storage/disk/disk_tier_test_util.h"
#include "storage/disk/mover.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;
using testing::Pattern;
using testing::SmallLayout;
using testing::SyntheticKey;

using DemoterTest = DiskTierTest;

constexpr uint64_t kChunkBytes = 4096;  // SmallLayout: 16 tokens x 256 bytes

// A host tier of four chunks whose evictions go to a DiskMover (synchronous by default).
class DemoterFixture {
 public:
  explicit DemoterFixture(DiskTier* disk, DiskMoverOptions options = {.max_queued_bytes = 0})
      : mover(DiskMover::Create(disk, options).value()) {}

  absl::Status Open() {
    auto host = HostTier::Create({.capacity_bytes = 4 * kChunkBytes,
                                  .page_bytes = 4096,
                                  .arena_name = "strata-demoter-test",
                                  .listener = mover.get()});
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
  std::unique_ptr<DiskMover> mover;
  std::unique_ptr<HostTier> tier;
};

TEST_P(DemoterTest, EvictedHostChunksLandOnDiskAndPromoteBack) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get());
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  EXPECT_EQ(host.mover->demoted(), 6u);
  EXPECT_EQ(host.mover->failed(), 0u);
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
  EXPECT_EQ(host.mover->demoted(), 7u);
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

// True when the disk tier holds chunk `id` of `layout` byte-exact.
bool DiskHolds(DiskTier& disk, const KvLayout& layout, uint64_t id) {
  AlignedBuffer bytes(kChunkBytes);
  return disk.Read(SyntheticKey(layout, id), bytes.span()).ok() &&
         std::memcmp(bytes.data(), Pattern(id, kChunkBytes).data(), kChunkBytes) == 0;
}

TEST_P(DemoterTest, MoverWritesEvictionsInTheBackground) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get(), DiskMoverOptions{});
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  host.mover->Flush();
  EXPECT_EQ(host.mover->demoted(), 6u);
  EXPECT_EQ(host.mover->failed(), 0u);
  EXPECT_EQ(host.mover->written_inline(), 0u);  // all went through the queue
  for (uint64_t id = 0; id < 6; ++id) EXPECT_TRUE(DiskHolds(**disk, host.layout, id)) << id;
  for (uint64_t id = 6; id < 10; ++id) EXPECT_TRUE(host.HostHolds(id)) << id;
  // Staging buffers are aligned: the disk writes read them in place.
  EXPECT_EQ((*disk)->stats().staged_writes, 0u);
}

TEST_P(DemoterTest, MoverUnderConcurrentReservesLosesNoChunk) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get(), {.max_queued_bytes = 3 * kChunkBytes, .max_batch_chunks = 2});
  ASSERT_TRUE(host.Open().ok());
  constexpr uint64_t kThreads = 4;
  constexpr uint64_t kPerThread = 25;
  testing::ForIdsOnThreads(kThreads, kPerThread,
                           [&](uint64_t id) { EXPECT_TRUE(host.Store(id).ok()) << id; });
  host.mover->Flush();
  uint64_t in_host = 0;
  for (uint64_t t = 0; t < kThreads; ++t) {
    for (uint64_t i = 0; i < kPerThread; ++i) {
      const uint64_t id = t * 1000 + i;
      if (host.HostHolds(id)) {
        ++in_host;
      } else {
        EXPECT_TRUE(DiskHolds(**disk, host.layout, id)) << id;
      }
    }
  }
  EXPECT_EQ(in_host, 4u);
  EXPECT_EQ(host.mover->demoted(), kThreads * kPerThread - 4);
  EXPECT_EQ(host.mover->failed(), 0u);
  EXPECT_TRUE(host.tier->CheckConsistency().ok());
}

TEST_P(DemoterTest, MoverStopWritesEverythingQueuedAndLaterEvictionsInline) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get(), DiskMoverOptions{});
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 30; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  host.mover->Stop();  // no Flush: Stop itself writes what is queued
  EXPECT_EQ(host.mover->demoted(), 26u);
  for (uint64_t id = 0; id < 26; ++id) EXPECT_TRUE(DiskHolds(**disk, host.layout, id)) << id;
  ASSERT_TRUE(host.Store(30).ok());
  EXPECT_EQ(host.mover->written_inline(), 1u);
  EXPECT_TRUE(DiskHolds(**disk, host.layout, 26));  // on disk when Store returned
  host.mover->Stop();                               // idempotent
}

TEST_P(DemoterTest, MoverCountsFailedWritesAndGoesOn) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get(), DiskMoverOptions{});
  ASSERT_TRUE(host.Open().ok());
  plan_->FailNextSyncs(1, EIO);
  for (uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  host.mover->Flush();
  EXPECT_EQ(host.mover->failed(), 1u);
  EXPECT_FALSE((*disk)->Contains(SyntheticKey(host.layout, 0)));
  ASSERT_TRUE(host.Store(5).ok());
  host.mover->Flush();
  EXPECT_EQ(host.mover->demoted(), 1u);
  EXPECT_TRUE(DiskHolds(**disk, host.layout, 1));
}

TEST(DiskMoverTest, RejectsBadOptions) {
  EXPECT_EQ(DiskMover::Create(nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Engines, DemoterTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::storage
