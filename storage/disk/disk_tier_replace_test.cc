// DiskTier::Replace: another form of a chunk swapped in whole, only while the chunk is unchanged,
// with the tier's accounting following it, across a restart, and while other threads read.
#include <atomic>
#include <thread>
#include <vector>

#include "storage/disk/testing/disk_tier_test_util.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;
using testing::KeyOf;
using testing::kTestFingerprint;
using testing::PayloadOf;
using testing::PutChunk;

using DiskTierReplaceTest = DiskTierTest;

// The second form of chunk `id`: other bytes, of another size, said to be an encoding.
constexpr uint64_t kPlainSize = 20000;
constexpr uint64_t kOtherSize = 9000;

std::vector<std::byte> OtherForm(uint64_t id) { return PayloadOf(id + 1000, kOtherSize); }

DiskPut OtherPut(uint64_t id, std::span<const std::span<const std::byte>> parts,
                 const std::vector<std::byte>& payload) {
  return {.key = KeyOf(id),
          .layout_fingerprint = kTestFingerprint,
          .payload = parts,
          .payload_checksum = ChecksumBytes(payload),
          .num_tokens = static_cast<uint32_t>(id),
          .encoding = {.codec = 1,
                       .decoded_bytes = kPlainSize,
                       .decoded_checksum = ChecksumBytes(PayloadOf(id, kPlainSize))}};
}

// Reads chunk `id` whole, whatever its form's size; empty on failure.
std::vector<std::byte> ReadAny(DiskTier& tier, uint64_t id) {
  const std::optional<DiskChunkInfo> info = tier.Lookup(KeyOf(id));
  if (!info.has_value()) return {};
  AlignedBuffer buffer(info->payload_bytes);
  if (!tier.Read(KeyOf(id), buffer.span().first(info->payload_bytes)).ok()) return {};
  return {buffer.data(), buffer.data() + info->payload_bytes};
}

TEST_P(DiskTierReplaceTest, SwapsTheFormInWholeAndKeepsItAcrossARestart) {
  {
    auto opened = OpenTier();
    ASSERT_TRUE(opened.ok()) << opened.status();
    DiskTier& tier = **opened;
    ASSERT_TRUE(PutChunk(tier, 1, kPlainSize).ok());
    ASSERT_TRUE(PutChunk(tier, 2, kPlainSize).ok());
    const DiskChunkInfo before = *tier.Lookup(KeyOf(1));
    const DiskTierStats stats_before = tier.stats();

    const std::vector<std::byte> other = OtherForm(1);
    const std::span<const std::byte> parts[] = {other};
    absl::StatusOr<bool> replaced = tier.Replace(OtherPut(1, parts, other), before);
    ASSERT_TRUE(replaced.ok()) << replaced.status();
    EXPECT_TRUE(*replaced);

    const std::optional<DiskChunkInfo> after = tier.Lookup(KeyOf(1));
    ASSERT_TRUE(after.has_value());
    EXPECT_EQ(after->payload_bytes, kOtherSize);
    EXPECT_EQ(after->payload_checksum, ChecksumBytes(other));
    EXPECT_EQ(after->encoding.codec, 1);
    EXPECT_EQ(after->encoding.decoded_bytes, kPlainSize);
    EXPECT_EQ(ReadAny(tier, 1), other);
    EXPECT_EQ(ReadAny(tier, 2), PayloadOf(2, kPlainSize)) << "its neighbour is untouched";

    const DiskTierStats stats = tier.stats();
    EXPECT_EQ(stats.chunks, 2u);
    EXPECT_EQ(stats.payload_bytes, stats_before.payload_bytes - kPlainSize + kOtherSize);
    EXPECT_EQ(stats.live_bytes,
              stats_before.live_bytes - RecordBytes(kPlainSize) + RecordBytes(kOtherSize));
    EXPECT_EQ(stats.decoded_bytes, stats_before.decoded_bytes);
    EXPECT_EQ(stats.encoded_chunks, 1u);

    // The chunk is no longer what `before` describes: a second replace from it does nothing.
    const std::vector<std::byte> third = PayloadOf(77, 5000);
    const std::span<const std::byte> third_parts[] = {third};
    DiskPut stale = OtherPut(1, third_parts, third);
    replaced = tier.Replace(stale, before);
    ASSERT_TRUE(replaced.ok());
    EXPECT_FALSE(*replaced);
    EXPECT_EQ(ReadAny(tier, 1), other);

    // Nor does one of a chunk that is gone.
    ASSERT_TRUE(tier.Remove(KeyOf(2)).value());
    const std::vector<std::byte> other2 = OtherForm(2);
    const std::span<const std::byte> parts2[] = {other2};
    replaced = tier.Replace(OtherPut(2, parts2, other2), before);
    ASSERT_TRUE(replaced.ok());
    EXPECT_FALSE(*replaced);
    EXPECT_FALSE(tier.Contains(KeyOf(2)));
    EXPECT_EQ(tier.stats().chunks, 1u);
  }
  auto reopened = OpenTier();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ(ReadAny(**reopened, 1), OtherForm(1)) << "the swapped entry is the durable one";
  EXPECT_FALSE((*reopened)->Contains(KeyOf(2)));
  EXPECT_EQ((*reopened)->stats().encoded_chunks, 1u);
}

TEST_P(DiskTierReplaceTest, ReadersGetOneFormOrTheOtherWhileItIsSwapped) {
  auto opened = OpenTier();
  ASSERT_TRUE(opened.ok()) << opened.status();
  DiskTier& tier = **opened;
  constexpr uint64_t kChunks = 4;
  for (uint64_t id = 0; id < kChunks; ++id) ASSERT_TRUE(PutChunk(tier, id, kPlainSize).ok());

  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, wrong{0};
  std::thread reader([&] {
    for (int i = 0; i < 20000 && !done.load(); ++i) {
      const uint64_t id = static_cast<uint64_t>(i) % kChunks;
      const std::optional<DiskChunkInfo> info = tier.Lookup(KeyOf(id));
      if (!info.has_value()) continue;
      AlignedBuffer buffer(info->payload_bytes);
      const absl::Status status = tier.Read(KeyOf(id), buffer.span().first(info->payload_bytes));
      // Swapped between the lookup and the read: a size that no longer fits, or gone.
      if (status.code() == absl::StatusCode::kInvalidArgument ||
          status.code() == absl::StatusCode::kAborted) {
        continue;
      }
      const std::vector<std::byte> got(buffer.data(), buffer.data() + info->payload_bytes);
      if (!status.ok() || (got != PayloadOf(id, kPlainSize) && got != OtherForm(id))) ++wrong;
      ++reads;
    }
  });
  // Back and forth between the two forms, each swap from what the chunk is now.
  for (int round = 0; round < 6; ++round) {
    for (uint64_t id = 0; id < kChunks; ++id) {
      const DiskChunkInfo now = *tier.Lookup(KeyOf(id));
      const bool plain = !now.encoding.encoded();
      const std::vector<std::byte> form = plain ? OtherForm(id) : PayloadOf(id, kPlainSize);
      const std::span<const std::byte> parts[] = {form};
      DiskPut put = OtherPut(id, parts, form);
      if (!plain) put.encoding = {};
      absl::StatusOr<bool> replaced = tier.Replace(put, now);
      ASSERT_TRUE(replaced.ok()) << replaced.status();
      EXPECT_TRUE(*replaced);
    }
  }
  done = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(tier.stats().checksum_failures, 0u);
  EXPECT_EQ(tier.stats().chunks, kChunks);
}

INSTANTIATE_TEST_SUITE_P(Engines, DiskTierReplaceTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::storage
