#include "storage/tiered/write_through.h"

#include "core/clock.h"
#include "storage/tiered/testing/host_over_disk.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;

// HostOverDisk whose commits are written through to the disk tier; a ManualClock drives leases.
class WriteThroughFixture : public testing::HostOverDisk {
 public:
  explicit WriteThroughFixture(DiskTier* disk, WriteThroughOptions options = {})
      : HostOverDisk(disk), write_through(WriteThrough::Create(&below, options).value()) {}
  // The write-through's thread and the host tier go before the clock and observer they use.
  ~WriteThroughFixture() {
    write_through->Stop();
    tier.reset();
  }

  absl::Status Open() {
    if (absl::Status s = HostOverDisk::Open(write_through.get(), &clock); !s.ok()) return s;
    write_through->Start(tier.get());
    return absl::OkStatus();
  }

  ManualClock clock;
  std::unique_ptr<WriteThrough> write_through;
};

class WriteThroughTest : public DiskTierTest {
 protected:
  // Opens `host` and stores chunk 0 with syncs held: its write is in flight on return.
  void OpenWithChunk0InFlight(WriteThroughFixture& host) {
    ASSERT_TRUE(host.Open().ok());
    plan_->HoldSyncs();
    ASSERT_TRUE(host.Store(0).ok());
    plan_->AwaitHeldSyncs(1);  // chunk 0's payload is written, its sync held
  }
};

TEST_P(WriteThroughTest, CommitsReachTheDiskWithoutCountingAsLoads) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  WriteThroughFixture host(disk->get());
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 3; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  host.write_through->Flush();

  for (uint64_t id = 0; id < 3; ++id) {
    EXPECT_TRUE(host.DiskHolds(id)) << id;
    EXPECT_TRUE(host.tier->Contains(host.Key(id))) << "write-through keeps the host copy";
  }
  const WriteThroughStats stats = host.write_through->Stats();
  EXPECT_EQ(stats.queued, 3u);
  EXPECT_EQ(stats.written, 3u);
  EXPECT_EQ(stats.pending, 0u);
  // The write-through's leases are copies, not loads.
  EXPECT_EQ(host.tier->Stats().hits, 0u);
  EXPECT_EQ(host.tier->Stats().misses, 0u);
  EXPECT_EQ(host.tier->Stats().active_leases, 0u);
  EXPECT_EQ((*disk)->stats().staged_writes, 0u) << "written from the arena pages in place";
  EXPECT_TRUE(host.tier->CheckConsistency().ok());
}

TEST_P(WriteThroughTest, EvictingAWrittenThroughChunkWritesNothingMore) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  WriteThroughFixture host(disk->get());
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  host.write_through->Flush();
  ASSERT_EQ((*disk)->stats().writes, 4u);

  // Two more chunks evict two written-through ones: the mover finds them on disk.
  for (uint64_t id = 4; id < 6; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  host.write_through->Flush();
  EXPECT_EQ(host.mover->demoted(), 2u);
  EXPECT_EQ((*disk)->stats().writes, 6u) << "only the two new chunks were written";
  for (uint64_t id = 0; id < 6; ++id) EXPECT_TRUE(host.DiskHolds(id)) << id;
}

TEST_P(WriteThroughTest, RemovalDuringTheWriteIsUndoneAndAFullQueueDrops) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  WriteThroughFixture host(disk->get(), {.max_queued_chunks = 1, .max_batch_chunks = 1});
  ASSERT_NO_FATAL_FAILURE(OpenWithChunk0InFlight(host));
  ASSERT_TRUE(host.Store(1).ok());  // queued
  ASSERT_TRUE(host.Store(2).ok());  // the queue is full: dropped
  ASSERT_TRUE(host.tier->Remove(host.Key(0)).ok());
  plan_->ReleaseSyncs();
  host.write_through->Flush();

  EXPECT_FALSE((*disk)->Contains(host.Key(0))) << "an operator's removal is not undone";
  EXPECT_TRUE(host.DiskHolds(1));
  EXPECT_FALSE((*disk)->Contains(host.Key(2)));
  const WriteThroughStats stats = host.write_through->Stats();
  EXPECT_EQ(stats.cancelled, 1u);
  EXPECT_EQ(stats.written, 1u);
  EXPECT_EQ(stats.dropped, 1u);
  EXPECT_EQ(stats.queued, 2u);
}

TEST_P(WriteThroughTest, ClearCancelsTheWriteInFlightAndDropsTheQueue) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  WriteThroughFixture host(disk->get(), {.max_batch_chunks = 1});
  ASSERT_NO_FATAL_FAILURE(OpenWithChunk0InFlight(host));
  ASSERT_TRUE(host.Store(1).ok());
  host.tier->RemoveAll();
  plan_->ReleaseSyncs();
  host.write_through->Flush();

  EXPECT_FALSE((*disk)->Contains(host.Key(0)));
  EXPECT_FALSE((*disk)->Contains(host.Key(1)));
  EXPECT_EQ(host.write_through->Stats().cancelled, 1u);
  EXPECT_EQ(host.write_through->Stats().pending, 0u);
}

TEST_P(WriteThroughTest, WriteThatOutlivesItsLeaseIsUndone) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  WriteThroughFixture host(disk->get(), {.lease = std::chrono::seconds(1)});
  ASSERT_NO_FATAL_FAILURE(OpenWithChunk0InFlight(host));
  // The lease runs out while the record waits for its sync: the pages may have been reused.
  host.clock.Advance(std::chrono::seconds(2));
  plan_->ReleaseSyncs();
  host.write_through->Flush();

  EXPECT_FALSE((*disk)->Contains(host.Key(0)));
  EXPECT_EQ(host.write_through->Stats().cancelled, 1u);
  EXPECT_TRUE(host.tier->Contains(host.Key(0)));
}

TEST_P(WriteThroughTest, ChunksGoneBeforeTheirTurnAreSkippedAndStopDropsTheQueue) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  WriteThroughFixture host(disk->get(), {.max_batch_chunks = 1});
  ASSERT_NO_FATAL_FAILURE(OpenWithChunk0InFlight(host));
  ASSERT_TRUE(host.Store(1).ok());
  ASSERT_TRUE(host.Store(2).ok());
  ASSERT_TRUE(host.tier->Remove(host.Key(1)).ok());  // queued, not in flight: skipped later
  plan_->ReleaseSyncs();
  host.write_through->Flush();
  EXPECT_TRUE(host.DiskHolds(0));
  EXPECT_FALSE((*disk)->Contains(host.Key(1)));
  EXPECT_TRUE(host.DiskHolds(2));
  EXPECT_EQ(host.write_through->Stats().skipped, 1u);

  host.write_through->Stop();
  ASSERT_TRUE(host.Store(3).ok());
  host.write_through->Flush();  // returns at once: nothing is queued after Stop
  EXPECT_FALSE((*disk)->Contains(host.Key(3)));
  EXPECT_EQ(host.write_through->Stats().queued, 3u);
}

TEST(WriteThroughOptionsTest, RejectsBadOptions) {
  EXPECT_EQ(WriteThrough::Create(nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Engines, WriteThroughTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::storage
