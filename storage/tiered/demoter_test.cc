#include "storage/tiered/chunk_transfer.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/synchronization/notification.h"
#include "storage/disk/testing/disk_tier_test_util.h"
#include "storage/tiered/demoter.h"
#include "storage/tiered/prefix_locator.h"
#include "storage/tiered/promoter.h"
#include "storage/tiered/testing/host_over_disk.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;
using testing::Pattern;
using testing::SmallLayout;
using testing::SyntheticKey;

using DemoterTest = DiskTierTest;

using DemoterFixture = testing::HostOverDisk;
constexpr uint64_t kChunkBytes = DemoterFixture::kChunkBytes;

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
  auto outcome = PromoteChunk(host.below, *host.tier, host.layout, SyntheticKey(host.layout, 2));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, PromoteOutcome::kPromoted);
  EXPECT_TRUE(host.HostHolds(2));
  EXPECT_EQ(host.mover->demoted(), 7u);
  // Arena pages are 4 KiB aligned: demotion and promotion moved the bytes in place.
  EXPECT_EQ((*disk)->stats().staged_writes, 0u);
  EXPECT_EQ((*disk)->stats().staged_reads, 0u);
  EXPECT_EQ(PromoteChunk(host.below, *host.tier, host.layout, SyntheticKey(host.layout, 2)).value(),
            PromoteOutcome::kAlreadyInHost);
  EXPECT_EQ(
      PromoteChunk(host.below, *host.tier, host.layout, SyntheticKey(host.layout, 999)).value(),
      PromoteOutcome::kNotBelow);
  EXPECT_TRUE(host.tier->CheckConsistency().ok());
}

TEST_P(DemoterTest, RunPromotionReadsTheChunksTogetherAndFailsOnlyTheBadOnes) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get());
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 8; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;  // 0-3 on disk
  ASSERT_EQ(PromoteChunk(host.below, *host.tier, host.layout, host.Key(3)).value(),
            PromoteOutcome::kPromoted);
  const uint64_t reads = (*disk)->stats().reads;

  // 0's first read request delivers a flipped byte; 3 is in both tiers; 99 is nowhere.
  const std::vector<ChunkKey> run = {host.Key(3), host.Key(0), host.Key(1), host.Key(99),
                                     host.Key(2)};
  plan_->FlipNextReads(1);
  const std::vector<absl::StatusOr<PromoteOutcome>> outcomes =
      PromoteRun(host.below, *host.tier, host.layout, run);
  ASSERT_EQ(outcomes.size(), run.size());
  EXPECT_EQ(outcomes[0].value(), PromoteOutcome::kAlreadyInHost);
  EXPECT_EQ(outcomes[1].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(outcomes[2].value(), PromoteOutcome::kPromoted);
  EXPECT_EQ(outcomes[3].value(), PromoteOutcome::kNotBelow);
  EXPECT_EQ(outcomes[4].value(), PromoteOutcome::kPromoted);
  EXPECT_TRUE(host.HostHolds(1));
  EXPECT_TRUE(host.HostHolds(2));
  EXPECT_FALSE(host.tier->Contains(host.Key(0)));
  EXPECT_FALSE((*disk)->Contains(host.Key(0))) << "the corrupt record is dropped";
  EXPECT_EQ((*disk)->stats().reads, reads + 2);
  EXPECT_EQ(host.tier->Stats().reservations, 0u) << "the failed chunk's reservation is aborted";
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
  auto outcome = PromoteChunk(host.below, *host.tier, host.layout, SyntheticKey(host.layout, 0));
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE((*disk)->Contains(SyntheticKey(host.layout, 0)));
  EXPECT_FALSE(host.tier->Contains(SyntheticKey(host.layout, 0)));
  EXPECT_EQ(host.tier->Stats().reservations, 0u);
  EXPECT_TRUE(host.tier->CheckConsistency().ok());
}

TEST_P(DemoterTest, MoverWritesEvictionsInTheBackground) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get(), DemoterOptions{});
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  host.mover->Flush();
  EXPECT_EQ(host.mover->demoted(), 6u);
  EXPECT_EQ(host.mover->failed(), 0u);
  EXPECT_EQ(host.mover->written_inline(), 0u);  // all went through the queue
  for (uint64_t id = 0; id < 6; ++id) EXPECT_TRUE(host.DiskHolds(id)) << id;
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
        EXPECT_TRUE(host.DiskHolds(id)) << id;
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
  DemoterFixture host(disk->get(), DemoterOptions{});
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 30; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  host.mover->Stop();  // no Flush: Stop itself writes what is queued
  EXPECT_EQ(host.mover->demoted(), 26u);
  for (uint64_t id = 0; id < 26; ++id) EXPECT_TRUE(host.DiskHolds(id)) << id;
  ASSERT_TRUE(host.Store(30).ok());
  EXPECT_EQ(host.mover->written_inline(), 1u);
  EXPECT_TRUE(host.DiskHolds(26));  // on disk when Store returned
  host.mover->Stop();               // idempotent
}

TEST_P(DemoterTest, MoverCountsFailedWritesAndGoesOn) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get(), DemoterOptions{});
  ASSERT_TRUE(host.Open().ok());
  plan_->FailNextSyncs(1, EIO);
  for (uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  host.mover->Flush();
  EXPECT_EQ(host.mover->failed(), 1u);
  EXPECT_FALSE((*disk)->Contains(SyntheticKey(host.layout, 0)));
  ASSERT_TRUE(host.Store(5).ok());
  host.mover->Flush();
  EXPECT_EQ(host.mover->demoted(), 1u);
  EXPECT_TRUE(host.DiskHolds(1));
}

TEST(DemoterOptionsTest, RejectsBadOptions) {
  EXPECT_EQ(Demoter::Create(nullptr, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(DemoterTest, ChunksWaitingForTheirDiskWriteAreFoundAndPromotedFromStaging) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  plan_->HoldSyncs();
  DemoterFixture host(disk->get(), {.max_queued_bytes = 1 << 20});
  ASSERT_TRUE(host.Open().ok());
  std::vector<ChunkKey> chain;
  for (uint64_t id = 0; id < 6; ++id) {
    ASSERT_TRUE(host.Store(id).ok()) << id;
    chain.push_back(SyntheticKey(host.layout, id));
  }
  // Chunks 0 and 1 were evicted; their writes are held before their sync: staged, in neither
  // tier's index.
  for (uint64_t id : {0, 1}) {
    EXPECT_FALSE(host.tier->Contains(chain[id])) << id;
    EXPECT_FALSE((*disk)->Contains(chain[id])) << id;
    EXPECT_TRUE(host.mover->IsStaged(chain[id])) << id;
  }
  LowerTier* const below[] = {&host.below};
  EXPECT_TRUE(LocatePrefix(*host.tier, below, chain).empty()) << "without the mover";
  const std::vector<Tier> tiers = LocatePrefix(*host.tier, below, chain, host.mover.get());
  ASSERT_EQ(tiers.size(), 6u);
  EXPECT_EQ(tiers[0], Tier::kDisk);
  EXPECT_EQ(tiers[1], Tier::kDisk);
  EXPECT_EQ(tiers[2], Tier::kHost);

  // Promoted from the staging buffer: byte-exact, no disk read. Its room evicts chunk 2, which
  // is staged by the time the promotion returns.
  auto outcome = PromoteChunk(host.below, *host.tier, host.layout, chain[0], host.mover.get());
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(*outcome, PromoteOutcome::kPromoted);
  EXPECT_TRUE(host.HostHolds(0));
  EXPECT_EQ((*disk)->stats().reads, 0u);
  EXPECT_TRUE(host.mover->IsStaged(chain[2]));
  outcome = PromoteChunk(host.below, *host.tier, host.layout, chain[2], host.mover.get());
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_TRUE(host.HostHolds(2));
  // A layout whose chunk size differs from the staged payload's is refused.
  KvLayout wider = host.layout;
  wider.head_dim = 32;
  EXPECT_EQ(PromoteChunk(host.below, *host.tier, wider, chain[1], host.mover.get()).status().code(),
            absl::StatusCode::kInvalidArgument);

  // The writes go through: the staged chunks land on disk and leave the staging index.
  plan_->ReleaseSyncs();
  host.mover->Flush();
  EXPECT_EQ(host.mover->failed(), 0u);
  for (uint64_t id : {0, 1, 2}) {
    EXPECT_FALSE(host.mover->IsStaged(chain[id])) << id;
    EXPECT_TRUE(host.DiskHolds(id)) << id;
  }
  EXPECT_TRUE(host.tier->CheckConsistency().ok());
}

TEST_P(DemoterTest, DiscardDropsQueuedDemotionsSoTheyNeverReachTheDisk) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get(), {.max_queued_bytes = 4 << 20});
  ASSERT_TRUE(host.Open().ok());
  host.mover->SetHeld(true);  // evictions stay queued
  std::vector<ChunkKey> chain;
  for (uint64_t id = 0; id < 6; ++id) {
    ASSERT_TRUE(host.Store(id).ok()) << id;
    chain.push_back(SyntheticKey(host.layout, id));
  }
  ASSERT_TRUE(host.mover->IsStaged(chain[0]));
  ASSERT_TRUE(host.mover->IsStaged(chain[1]));
  EXPECT_EQ(host.mover->Discard([&](const ChunkKey& key) { return key == chain[0]; }), 1u);
  EXPECT_FALSE(host.mover->IsStaged(chain[0]));
  EXPECT_TRUE(host.mover->IsStaged(chain[1]));
  host.mover->SetHeld(false);
  host.mover->Flush();
  EXPECT_FALSE(host.DiskHolds(0)) << "a discarded demotion was written";
  EXPECT_TRUE(host.DiskHolds(1));
  EXPECT_EQ(host.mover->failed(), 0u);
  EXPECT_TRUE(host.tier->CheckConsistency().ok());
}

using PromoterTest = DiskTierTest;

TEST_P(PromoterTest, PrefetchPromotesDiskOnlyChunksInTheBackground) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get());
  ASSERT_TRUE(host.Open().ok());
  // Chunks 0-5 go to disk; 6-9 stay in the host tier.
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  auto promoter = Promoter::Create({&host.below}, host.tier.get(), {});
  ASSERT_TRUE(promoter.ok()) << promoter.status();

  // Host-resident chunks are not queued, and the run stops at a chunk in neither tier.
  std::vector<ChunkKey> chain;
  for (uint64_t id : {8, 0, 1, 9, 2, 777, 3}) chain.push_back(SyntheticKey(host.layout, id));
  const uint64_t reads_before = (*disk)->stats().reads;
  auto queued = (*promoter)->Enqueue(host.layout, chain);
  ASSERT_TRUE(queued.ok()) << queued.status();
  EXPECT_EQ(*queued, 3u);
  (*promoter)->Flush();
  const PromoterStats stats = (*promoter)->Stats();
  EXPECT_EQ(stats.queued, 3u);
  EXPECT_EQ(stats.promoted, 3u);
  EXPECT_EQ(stats.failed, 0u);
  EXPECT_EQ(stats.pending, 0u);
  // Soft pins within half the tier (two of its four chunks): 0 and 1, not 2.
  EXPECT_EQ(stats.pinned, 2u);
  EXPECT_EQ(host.tier->Stats().soft_pinned_bytes, 2 * kChunkBytes);
  EXPECT_EQ((*disk)->stats().reads, reads_before + 3);
  for (uint64_t id : {0, 1, 2}) EXPECT_TRUE(host.HostHolds(id)) << id;
  EXPECT_FALSE(host.tier->Contains(SyntheticKey(host.layout, 3)));

  // Now in the host tier: a second prefetch queues nothing and reads nothing.
  const ChunkKey promoted[] = {SyntheticKey(host.layout, 0), SyntheticKey(host.layout, 1),
                               SyntheticKey(host.layout, 2)};
  EXPECT_EQ((*promoter)->Enqueue(host.layout, promoted).value(), 0u);
  (*promoter)->Flush();
  EXPECT_EQ((*disk)->stats().reads, reads_before + 3);
  EXPECT_TRUE(host.tier->CheckConsistency().ok());
}

TEST_P(PromoterTest, BadInputsAndStopAreClearErrors) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get());
  ASSERT_TRUE(host.Open().ok());
  EXPECT_EQ(Promoter::Create({}, host.tier.get(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Promoter::Create({nullptr}, host.tier.get(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Promoter::Create({&host.below}, host.tier.get(), {.max_queued_chunks = 0}).status().code(),
      absl::StatusCode::kInvalidArgument);
  auto promoter = Promoter::Create({&host.below}, host.tier.get(), {});
  ASSERT_TRUE(promoter.ok());
  const ChunkKey other_layout[] = {SyntheticKey(SmallLayout("other-model"), 1)};
  EXPECT_EQ((*promoter)->Enqueue(host.layout, other_layout).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*promoter)->Enqueue(KvLayout{}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  (*promoter)->Stop();
  const ChunkKey mine[] = {SyntheticKey(host.layout, 1)};
  EXPECT_EQ((*promoter)->Enqueue(host.layout, mine).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// An eviction listener that holds the first eviction until released.
class GateListener final : public EvictionListener {
 public:
  void OnEvicted(const ChunkKey&, const PayloadView&, uint64_t, uint32_t, std::string_view,
                 const StoredEncoding&) override {
    if (entered.HasBeenNotified()) return;
    entered.Notify();
    release.WaitForNotification();
  }
  absl::Notification entered;
  absl::Notification release;
};

TEST_P(PromoterTest, QueueIsBoundedAndDuplicatesAreSkipped) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  const KvLayout layout = SmallLayout();
  for (uint64_t id = 1; id <= 3; ++id) {
    const std::vector<std::byte> payload = Pattern(id, kChunkBytes);
    ASSERT_TRUE((*disk)
                    ->Put(SyntheticKey(layout, id), layout.Fingerprint(), payload,
                          ChecksumBytes(payload), 16)
                    .ok());
  }
  // A host tier of one chunk, full: promoting chunk 1 evicts chunk 0 into the gate.
  GateListener gate;
  auto host = HostTier::Create({.capacity_bytes = kChunkBytes,
                                .page_bytes = 4096,
                                .arena_name = "strata-promoter-test",
                                .listener = &gate});
  ASSERT_TRUE(host.ok());
  auto reserved = (*host)->Reserve(layout, SyntheticKey(layout, 0), {.num_tokens = 16});
  ASSERT_TRUE(reserved.ok());
  reserved->reservation.payload().CopyFrom(Pattern(0, kChunkBytes));
  ASSERT_TRUE((*host)->Commit(std::move(reserved->reservation)).ok());

  DiskLowerTier below(disk->get());
  auto promoter = Promoter::Create({&below}, host->get(), {.max_queued_chunks = 2});
  ASSERT_TRUE(promoter.ok());
  const ChunkKey one[] = {SyntheticKey(layout, 1)};
  EXPECT_EQ((*promoter)->Enqueue(layout, one).value(), 1u);
  gate.entered.WaitForNotification();                        // chunk 1's promotion is under way
  EXPECT_EQ((*promoter)->Enqueue(layout, one).value(), 0u);  // pending already
  const ChunkKey two_three[] = {SyntheticKey(layout, 2), SyntheticKey(layout, 3)};
  EXPECT_EQ((*promoter)->Enqueue(layout, two_three).value(), 1u);  // room for one
  const ChunkKey three[] = {SyntheticKey(layout, 3)};
  const auto full = (*promoter)->Enqueue(layout, three);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted) << full.status();
  EXPECT_EQ((*promoter)->Stats().pending, 2u);

  // A waiter on chunk 1 (in flight) waits until its promotion ends; chunk 2 is only queued.
  EXPECT_FALSE((*promoter)->AwaitInFlight(SyntheticKey(layout, 2)));
  std::atomic<bool> waited{false};
  std::thread waiter([&] {
    EXPECT_TRUE((*promoter)->AwaitInFlight(SyntheticKey(layout, 1)));
    waited = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(waited.load()) << "returned while chunk 1 was in flight";

  gate.release.Notify();
  waiter.join();
  EXPECT_TRUE(waited.load());
  (*promoter)->Flush();
  const PromoterStats stats = (*promoter)->Stats();
  EXPECT_EQ(stats.queued, 2u);
  EXPECT_EQ(stats.promoted, 2u);
  EXPECT_EQ(stats.pending, 0u);
  // The tier holds one chunk: the last promoted, chunk 2, byte-exact.
  auto lease = (*host)->Acquire(SyntheticKey(layout, 2));
  ASSERT_TRUE(lease.ok() && lease->has_value());
  std::vector<std::byte> bytes(kChunkBytes);
  (*lease)->payload().CopyTo(bytes);
  EXPECT_EQ(bytes, Pattern(2, kChunkBytes));
}

TEST_P(PromoterTest, FailedReadIsCountedAndNothingIsServed) {
  auto disk = OpenTier();
  ASSERT_TRUE(disk.ok()) << disk.status();
  DemoterFixture host(disk->get());
  ASSERT_TRUE(host.Open().ok());
  for (uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(host.Store(id).ok()) << id;
  ASSERT_TRUE((*disk)->Contains(SyntheticKey(host.layout, 0)));
  auto promoter = Promoter::Create({&host.below}, host.tier.get(), {});
  ASSERT_TRUE(promoter.ok());
  plan_->FlipNextReads(1);
  const ChunkKey zero[] = {SyntheticKey(host.layout, 0)};
  EXPECT_EQ((*promoter)->Enqueue(host.layout, zero).value(), 1u);
  (*promoter)->Flush();
  EXPECT_EQ((*promoter)->Stats().failed, 1u);
  EXPECT_EQ((*promoter)->Stats().promoted, 0u);
  EXPECT_FALSE(host.tier->Contains(SyntheticKey(host.layout, 0)));
  EXPECT_FALSE((*disk)->Contains(SyntheticKey(host.layout, 0)));
  EXPECT_EQ(host.tier->Stats().reservations, 0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, PromoterTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

INSTANTIATE_TEST_SUITE_P(Engines, DemoterTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::storage
