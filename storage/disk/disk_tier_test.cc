#include "storage/disk/disk_tier.h"

#include <cerrno>
#include <cstring>

#include "storage/disk/disk_tier_test_util.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;
using testing::KeyOf;
using testing::kTestFingerprint;
using testing::PayloadOf;
using testing::PutChunk;
using testing::ReadChunk;

TEST_P(DiskTierTest, PutLookupReadRemove) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->engine_name(), testing::KindName(GetParam()));
  const uint64_t sizes[] = {0, 1, 4096, 5000, 300000};
  for (uint64_t id = 0; id < 5; ++id) {
    ASSERT_TRUE(PutChunk(**tier, id, sizes[id]).ok()) << id;
  }
  for (uint64_t id = 0; id < 5; ++id) {
    EXPECT_TRUE(ReadChunk(**tier, id, sizes[id]).ok()) << id;
    const std::optional<DiskChunkInfo> info = (*tier)->Lookup(KeyOf(id));
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->payload_bytes, sizes[id]);
    EXPECT_EQ(info->layout_fingerprint, kTestFingerprint);
    EXPECT_EQ(info->num_tokens, id);
    EXPECT_EQ(info->payload_checksum, ChecksumBytes(PayloadOf(id, sizes[id])));
  }
  // An unaligned destination goes through the staging path.
  std::vector<std::byte> unaligned(5001);
  ASSERT_TRUE((*tier)->Read(KeyOf(3), std::span(unaligned).subspan(1)).ok());
  EXPECT_EQ(std::memcmp(unaligned.data() + 1, PayloadOf(3, 5000).data(), 5000), 0);
  EXPECT_EQ((*tier)->Read(KeyOf(3), std::span(unaligned)).code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_TRUE(PutChunk(**tier, 4, sizes[4]).ok());  // already there: OK, nothing written
  DiskTierStats stats = (*tier)->stats();
  EXPECT_EQ(stats.writes, 5u);
  EXPECT_EQ(stats.chunks, 5u);
  EXPECT_EQ(stats.payload_bytes, 0u + 1 + 4096 + 5000 + 300000);

  EXPECT_TRUE((*tier)->Remove(KeyOf(2)).value());
  EXPECT_FALSE((*tier)->Remove(KeyOf(2)).value());
  EXPECT_FALSE((*tier)->Contains(KeyOf(2)));
  EXPECT_FALSE((*tier)->Lookup(KeyOf(99)).has_value());
  EXPECT_EQ(ReadChunk(**tier, 2, 4096).code(), absl::StatusCode::kAborted);
  stats = (*tier)->stats();
  EXPECT_EQ(stats.chunks, 4u);
  EXPECT_EQ(stats.reads, 5u + 1);
  EXPECT_EQ(stats.io_errors + stats.checksum_failures, 0u);
  EXPECT_EQ(stats.staged_reads, 1u);  // the unaligned destination; the others were in place
}

TEST_P(DiskTierTest, WritesAndReadsPayloadsInSeveralParts) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  const std::vector<std::byte> payload = PayloadOf(7, 3 * 8192 + 100);
  // Aligned parts (arena pages): written and read without staging.
  AlignedBuffer pages(payload.size());
  std::memcpy(pages.data(), payload.data(), payload.size());
  const std::span<const std::byte> in[] = {
      {pages.data(), 8192}, {pages.data() + 8192, 16384}, {pages.data() + 24576, 100}};
  ASSERT_TRUE((*tier)->Put(KeyOf(7), kTestFingerprint, in, ChecksumBytes(payload), 16).ok());
  AlignedBuffer out(payload.size());
  const std::span<std::byte> out_parts[] = {{out.data(), 16384}, {out.data() + 16384, 8192 + 100}};
  ASSERT_TRUE((*tier)->Read(KeyOf(7), out_parts).ok());
  EXPECT_EQ(std::memcmp(out.data(), payload.data(), payload.size()), 0);
  // Unaligned parts: staged.
  const std::span<const std::byte> odd[] = {{payload.data(), 1000},
                                            {payload.data() + 1000, payload.size() - 1000}};
  ASSERT_TRUE((*tier)->Put(KeyOf(8), kTestFingerprint, odd, ChecksumBytes(payload), 16).ok());
  std::vector<std::byte> a(3000), b(payload.size() - 3000);
  const std::span<std::byte> odd_out[] = {a, b};
  ASSERT_TRUE((*tier)->Read(KeyOf(8), odd_out).ok());
  EXPECT_EQ(std::memcmp(a.data(), payload.data(), a.size()), 0);
  EXPECT_EQ(std::memcmp(b.data(), payload.data() + a.size(), b.size()), 0);
}

TEST_P(DiskTierTest, ReadFailuresAreDataLossAndDropTheChunk) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(PutChunk(**tier, id, 200000).ok());

  plan_->FailNext(IoOp::kRead, 1, EIO);
  EXPECT_EQ(ReadChunk(**tier, 0, 200000).code(), absl::StatusCode::kDataLoss);
  plan_->ShortNext(IoOp::kRead, 1);
  EXPECT_EQ(ReadChunk(**tier, 1, 200000).code(), absl::StatusCode::kDataLoss);
  plan_->FlipNextReads(1);
  EXPECT_EQ(ReadChunk(**tier, 2, 200000).code(), absl::StatusCode::kDataLoss);
  for (uint64_t id = 0; id < 3; ++id) EXPECT_FALSE((*tier)->Contains(KeyOf(id))) << id;
  EXPECT_TRUE(ReadChunk(**tier, 3, 200000).ok());
  const DiskTierStats stats = (*tier)->stats();
  EXPECT_EQ(stats.io_errors, 2u);
  EXPECT_EQ(stats.checksum_failures, 1u);
  EXPECT_EQ(stats.dropped_records, 3u);
  EXPECT_EQ(stats.chunks, 1u);

  // Dropped for good: the index forgot them too.
  tier->reset();
  tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_FALSE((*tier)->Contains(KeyOf(2)));
  EXPECT_TRUE(ReadChunk(**tier, 3, 200000).ok());
}

TEST_P(DiskTierTest, WriteFailuresRejectThePutAndReadsGoOn) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  ASSERT_TRUE(PutChunk(**tier, 1, 50000).ok());

  plan_->FailNext(IoOp::kWrite, 1, ENOSPC);
  EXPECT_EQ(PutChunk(**tier, 2, 50000).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(ReadChunk(**tier, 1, 50000).ok());
  plan_->ShortNext(IoOp::kWrite, 1);
  EXPECT_EQ(PutChunk(**tier, 2, 50000).code(), absl::StatusCode::kResourceExhausted);
  plan_->FailNext(IoOp::kWrite, 1, EIO);
  EXPECT_EQ(PutChunk(**tier, 2, 50000).code(), absl::StatusCode::kUnavailable);
  plan_->FailNextSyncs(1, EIO);
  EXPECT_EQ(PutChunk(**tier, 2, 50000).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE((*tier)->Contains(KeyOf(2)));
  EXPECT_EQ((*tier)->stats().io_errors, 4u);

  ASSERT_TRUE(PutChunk(**tier, 2, 50000).ok());
  EXPECT_TRUE(ReadChunk(**tier, 2, 50000).ok());
  EXPECT_TRUE(ReadChunk(**tier, 1, 50000).ok());

  // The failed attempts left no chunk behind after a restart either.
  tier->reset();
  tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->stats().chunks, 2u);
  EXPECT_TRUE(ReadChunk(**tier, 2, 50000).ok());
}

TEST_P(DiskTierTest, CapacityIsNeverExceededAndEvictsLeastRecentlyUsed) {
  options_.capacity_bytes = 4 << 20;
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  constexpr uint64_t kSize = 100000;  // 104 KiB records: 10 per 1 MiB segment
  for (uint64_t id = 0; id < 120; ++id) {
    ASSERT_TRUE(PutChunk(**tier, id, kSize).ok()) << id;
    // Chunk 0 stays hot, so LRU keeps it.
    ASSERT_TRUE(ReadChunk(**tier, 0, kSize).ok()) << id;
    ASSERT_LE(SegmentFileBytes(), options_.capacity_bytes) << id;
    ASSERT_LE((*tier)->stats().disk_bytes, options_.capacity_bytes) << id;
  }
  const DiskTierStats stats = (*tier)->stats();
  EXPECT_GT(stats.evictions, 80u);
  EXPECT_GT(stats.compacted_segments, 0u);  // chunk 0 was copied forward, not evicted
  EXPECT_LE(stats.live_bytes, options_.capacity_bytes);
  EXPECT_TRUE(ReadChunk(**tier, 119, kSize).ok());
  EXPECT_FALSE((*tier)->Contains(KeyOf(1)));
  EXPECT_EQ(stats.io_errors, 0u);
  // Too large for a segment.
  EXPECT_EQ(PutChunk(**tier, 1000, 2 << 20).code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(DiskTierTest, RejectsBadOptions) {
  options_.capacity_bytes = options_.segment_bytes;
  EXPECT_EQ(OpenTier().status().code(), absl::StatusCode::kInvalidArgument);
  options_.capacity_bytes = 16 << 20;
  options_.segment_bytes = 1000;
  EXPECT_EQ(OpenTier().status().code(), absl::StatusCode::kInvalidArgument);
  options_.segment_bytes = 1 << 20;
  options_.eviction_policy = "no-such-policy";
  EXPECT_EQ(OpenTier().status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Engines, DiskTierTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::storage
