// Restart behaviour of DiskTier: reopening after an unclean close, re-indexing, torn and corrupt
// records.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "core/scoped_fd.h"
#include "storage/disk/disk_index.h"
#include "storage/disk/record_format.h"
#include "storage/disk/testing/disk_tier_test_util.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;
using testing::KeyOf;
using testing::PayloadOf;
using testing::PutChunk;
using testing::ReadChunk;

class DiskTierRecoveryTest : public DiskTierTest {
 protected:
  // Leaves the state a Put of chunk `id` killed between fdatasync and the index write leaves (with
  // the tier closed): the record is in its segment, the index neither names it nor has a
  // watermark past it.
  void ForgetIndexEntry(uint64_t id) {
    auto index = DiskIndex::Open({.path = options_.directory + "/index"});
    ASSERT_TRUE(index.ok()) << index.status();
    ASSERT_TRUE((*index)->Delete(KeyOf(id)).ok());
    ASSERT_TRUE((*index)->SetWatermark({0, 0}).ok());
  }
};

uint64_t SizeOf(uint64_t id) { return 1000 + (id * 7919) % 150000; }

TEST_P(DiskTierRecoveryTest, ReopenServesEveryCommittedChunkByteExact) {
  {
    auto tier = OpenTier();
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (uint64_t id = 0; id < 40; ++id) ASSERT_TRUE(PutChunk(**tier, id, SizeOf(id)).ok()) << id;
    ASSERT_TRUE((*tier)->Remove(KeyOf(5)).value());
    ASSERT_GT((*tier)->stats().segments, 2u);
  }  // no shutdown step exists: destruction is as unclean as a crash for the segment files
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  const DiskTierStats stats = (*tier)->stats();
  EXPECT_EQ(stats.chunks, 39u);
  EXPECT_EQ(stats.recovered_records, 0u);
  EXPECT_EQ(stats.dropped_records, 0u);
  for (uint64_t id = 0; id < 40; ++id) {
    if (id == 5) {
      EXPECT_FALSE((*tier)->Contains(KeyOf(id)));
    } else {
      EXPECT_TRUE(ReadChunk(**tier, id, SizeOf(id)).ok()) << id;
    }
  }
  // New chunks go to a new segment and survive the next restart too.
  ASSERT_TRUE(PutChunk(**tier, 100, 4096).ok());
  tier->reset();
  tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_TRUE(ReadChunk(**tier, 100, 4096).ok());
  EXPECT_TRUE(ReadChunk(**tier, 39, SizeOf(39)).ok());
}

TEST_P(DiskTierRecoveryTest, DurableRecordMissingFromTheIndexIsReindexed) {
  {
    auto tier = OpenTier();
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (uint64_t id = 0; id < 3; ++id) ASSERT_TRUE(PutChunk(**tier, id, SizeOf(id)).ok());
  }
  ForgetIndexEntry(1);
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->stats().recovered_records, 1u);
  for (uint64_t id = 0; id < 3; ++id) EXPECT_TRUE(ReadChunk(**tier, id, SizeOf(id)).ok()) << id;
}

// Puts chunk `id` (PayloadOf(id, SizeOf(id))) under `tenant`.
absl::Status PutForTenant(DiskTier& tier, uint64_t id, std::string_view tenant) {
  const std::vector<std::byte> payload = PayloadOf(id, SizeOf(id));
  const std::span<const std::byte> parts[] = {payload};
  const DiskPut put{.key = KeyOf(id),
                    .layout_fingerprint = testing::kTestFingerprint,
                    .payload = parts,
                    .payload_checksum = ChecksumBytes(payload),
                    .num_tokens = 16,
                    .tenant = tenant};
  return tier.PutBatch({&put, 1}).front();
}

// The ids of the chunks `tenant` stored, listed two index entries a page.
std::vector<uint64_t> TenantIds(const DiskTier& tier, const std::string& tenant) {
  std::vector<uint64_t> ids;
  DiskListOptions options{.limit = 2, .tenant = tenant};
  do {
    absl::StatusOr<DiskChunkPage> page = tier.List(options);
    if (!page.ok()) {
      ADD_FAILURE() << page.status();
      return ids;
    }
    for (const auto& [key, info] : page->chunks) {
      EXPECT_EQ(info.tenant, tenant);
      for (uint64_t id = 0; id < 100; ++id) {
        if (KeyOf(id) == key) ids.push_back(id);
      }
    }
    options.after = page->resume_after;
  } while (options.after.has_value());
  std::sort(ids.begin(), ids.end());
  return ids;
}

TEST_P(DiskTierRecoveryTest, TenantsSurviveARestartReindexingAndCompaction) {
  const std::string too_long(kMaxRecordTenantBytes + 1, 'z');
  {
    auto tier = OpenTier();
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (uint64_t id = 0; id < 8; ++id) {
      ASSERT_TRUE(PutForTenant(**tier, id, id % 2 == 0 ? "alice" : "bob").ok()) << id;
    }
    ASSERT_TRUE(PutForTenant(**tier, 8, too_long).ok());  // stored, as no tenant's
    ASSERT_TRUE(PutChunk(**tier, 9, SizeOf(9)).ok());
    EXPECT_EQ(TenantIds(**tier, "alice"), (std::vector<uint64_t>{0, 2, 4, 6}));
    EXPECT_EQ(TenantIds(**tier, "bob"), (std::vector<uint64_t>{1, 3, 5, 7}));
    EXPECT_EQ(TenantIds(**tier, ""), (std::vector<uint64_t>{8, 9}));
    EXPECT_EQ(TenantIds(**tier, "carol"), std::vector<uint64_t>{});
    EXPECT_EQ((*tier)->Lookup(KeyOf(3))->tenant, "bob");
    EXPECT_EQ((*tier)->Lookup(KeyOf(8))->tenant, "");
  }
  ForgetIndexEntry(2);  // re-indexed from its record's header, tenant included
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->stats().recovered_records, 1u);
  EXPECT_EQ(TenantIds(**tier, "alice"), (std::vector<uint64_t>{0, 2, 4, 6}));
  EXPECT_EQ(TenantIds(**tier, "bob"), (std::vector<uint64_t>{1, 3, 5, 7}));

  // Compaction copies the records forward with their tenants.
  for (uint64_t id : {1, 3, 5}) ASSERT_TRUE((*tier)->Remove(KeyOf(id)).value());
  for (uint64_t id = 10; id < 30; ++id) ASSERT_TRUE(PutChunk(**tier, id, SizeOf(id)).ok());
  for (uint64_t id = 10; id < 30; ++id) ASSERT_TRUE((*tier)->Remove(KeyOf(id)).value());
  absl::StatusOr<int> compacted = (*tier)->Compact(0.01);
  ASSERT_TRUE(compacted.ok()) << compacted.status();
  EXPECT_GT(*compacted, 0);
  EXPECT_EQ(TenantIds(**tier, "alice"), (std::vector<uint64_t>{0, 2, 4, 6}));
  EXPECT_EQ(TenantIds(**tier, "bob"), (std::vector<uint64_t>{7}));
  tier->reset();
  tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ(TenantIds(**tier, "alice"), (std::vector<uint64_t>{0, 2, 4, 6}));
  for (uint64_t id : {0, 2, 4, 6, 7}) EXPECT_TRUE(ReadChunk(**tier, id, SizeOf(id)).ok()) << id;
}

TEST_P(DiskTierRecoveryTest, TornRecordIsDroppedAndNeverServed) {
  {
    auto tier = OpenTier();
    ASSERT_TRUE(tier.ok()) << tier.status();
    ASSERT_TRUE(PutChunk(**tier, 1, 20000).ok());
    ASSERT_TRUE(PutChunk(**tier, 2, 300000).ok());
  }
  // Cut the last record in the middle of its payload.
  const auto segments = SegmentFiles();
  ASSERT_EQ(segments.size(), 1u);
  const uint64_t size = std::filesystem::file_size(segments[0]);
  std::filesystem::resize_file(segments[0], size - 128 * 1024);
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_FALSE((*tier)->Contains(KeyOf(2)));
  EXPECT_EQ((*tier)->stats().dropped_records, 1u);
  EXPECT_TRUE(ReadChunk(**tier, 1, 20000).ok());
}

TEST_P(DiskTierRecoveryTest, GarbageAfterTheLastRecordIsCutAway) {
  std::filesystem::path segment;
  uint64_t good_size = 0;
  {
    auto tier = OpenTier();
    ASSERT_TRUE(tier.ok()) << tier.status();
    ASSERT_TRUE(PutChunk(**tier, 1, 20000).ok());
    segment = SegmentFiles().at(0);
    good_size = std::filesystem::file_size(segment);
  }
  // A torn append: a header-sized block of garbage and a partial block after the last record.
  {
    ScopedFd fd(::open(segment.c_str(), O_WRONLY | O_APPEND));
    ASSERT_TRUE(fd.valid());
    const std::vector<std::byte> garbage = testing::Pattern(99, kRecordHeaderBytes + 100);
    ASSERT_EQ(::write(fd.get(), garbage.data(), garbage.size()),
              static_cast<ssize_t>(garbage.size()));
  }
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ(std::filesystem::file_size(segment), good_size);
  EXPECT_EQ((*tier)->stats().dropped_records, 1u);
  EXPECT_EQ((*tier)->stats().chunks, 1u);
  EXPECT_TRUE(ReadChunk(**tier, 1, 20000).ok());
}

TEST_P(DiskTierRecoveryTest, FlippedByteInASegmentIsDataLossAndTheChunkIsDropped) {
  {
    auto tier = OpenTier();
    ASSERT_TRUE(tier.ok()) << tier.status();
    ASSERT_TRUE(PutChunk(**tier, 1, 50000).ok());
    ASSERT_TRUE(PutChunk(**tier, 2, 50000).ok());
  }
  {
    // Chunk 1's record is first: flip a byte in the middle of its payload.
    ScopedFd fd(::open(SegmentFiles().at(0).c_str(), O_RDWR));
    ASSERT_TRUE(fd.valid());
    std::byte b{};
    const off_t at = static_cast<off_t>(kRecordHeaderBytes + 25000);
    ASSERT_EQ(::pread(fd.get(), &b, 1, at), 1);
    b = ~b;
    ASSERT_EQ(::pwrite(fd.get(), &b, 1, at), 1);
  }
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_TRUE((*tier)->Contains(KeyOf(1)));  // not re-read at start-up: caught on first read
  EXPECT_EQ(ReadChunk(**tier, 1, 50000).code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE((*tier)->Contains(KeyOf(1)));
  EXPECT_EQ((*tier)->stats().checksum_failures, 1u);
  EXPECT_TRUE(ReadChunk(**tier, 2, 50000).ok());
  tier->reset();
  tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_FALSE((*tier)->Contains(KeyOf(1)));
  EXPECT_TRUE(ReadChunk(**tier, 2, 50000).ok());
}

INSTANTIATE_TEST_SUITE_P(Engines, DiskTierRecoveryTest,
                         ::testing::Values(IoEngineKind::kIoUring, IoEngineKind::kSync),
                         testing::EngineParamName);

}  // namespace
}  // namespace strata::storage
