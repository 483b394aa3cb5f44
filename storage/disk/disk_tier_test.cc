#include "storage/disk/disk_tier.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "storage/disk/record_format.h"
#include "storage/disk/testing/disk_tier_test_util.h"

namespace strata::storage {
namespace {

using testing::DiskTierTest;
using testing::KeyOf;
using testing::kTestFingerprint;
using testing::PayloadOf;
using testing::PutChunk;
using testing::ReadChunk;
using testing::SyntheticKey;

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

// Every page of a listing from the start, until it says it is complete.
std::vector<std::pair<ChunkKey, DiskChunkInfo>> ListAll(const DiskTier& tier, uint32_t limit,
                                                        uint64_t layout_fingerprint = 0) {
  std::vector<std::pair<ChunkKey, DiskChunkInfo>> all;
  DiskListOptions options{.limit = limit, .layout_fingerprint = layout_fingerprint};
  for (int pages = 0; pages < 1000; ++pages) {
    absl::StatusOr<DiskChunkPage> page = tier.List(options);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    EXPECT_LE(page->chunks.size(), limit);
    all.insert(all.end(), page->chunks.begin(), page->chunks.end());
    if (!page->resume_after.has_value()) break;
    options.after = page->resume_after;
  }
  return all;
}

TEST_P(DiskTierTest, ListPagesThroughEveryChunkInKeyOrderAcrossARestart) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(PutChunk(**tier, id, 100 + id).ok());
  const ChunkKey other = SyntheticKey(0xABCD, 77);
  const std::vector<std::byte> payload = PayloadOf(77, 64);
  ASSERT_TRUE((*tier)->Put(other, 0xABCD, payload, ChecksumBytes(payload), 5).ok());

  for (const uint32_t limit : {1u, 3u, 11u, 100u}) {
    const auto all = ListAll(**tier, limit);
    ASSERT_EQ(all.size(), 11u) << limit;
    EXPECT_TRUE(std::is_sorted(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return EncodeKey(a.first) < EncodeKey(b.first);
    }));
    for (const auto& [key, info] : all) EXPECT_EQ((*tier)->Lookup(key), info);
  }
  const auto others = ListAll(**tier, 4, 0xABCD);
  ASSERT_EQ(others.size(), 1u);
  EXPECT_EQ(others[0].first, other);
  EXPECT_EQ(others[0].second.num_tokens, 5u);
  EXPECT_EQ(ListAll(**tier, 4, 0x9999).size(), 0u);
  EXPECT_EQ((*tier)->List({.limit = 0}).status().code(), absl::StatusCode::kInvalidArgument);

  // A page resumes after its last key even when that chunk is gone.
  absl::StatusOr<DiskChunkPage> first = (*tier)->List({.limit = 4});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->resume_after.has_value());
  ASSERT_TRUE((*tier)->Remove(*first->resume_after).value());
  absl::StatusOr<DiskChunkPage> rest = (*tier)->List({.after = first->resume_after, .limit = 100});
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ(rest->chunks.size(), 7u);
  EXPECT_FALSE(rest->resume_after.has_value());

  // The index the listing reads survives a restart.
  tier->reset();
  tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ(ListAll(**tier, 2).size(), 10u);
}

// Applies the observer's calls to a set of keys, counting removals by cause.
class MirroringObserver final : public ChunkObserver {
 public:
  void OnStored(const ChunkKey& key, const ChunkKey& parent, uint32_t num_tokens,
                std::span<const uint32_t> token_ids) override {
    EXPECT_TRUE(parent.empty());
    EXPECT_TRUE(token_ids.empty());
    EXPECT_EQ(num_tokens, KeyId(key) % 1000);
    EXPECT_TRUE(keys.insert(key).second) << "stored twice";
  }
  void OnRemoved(const ChunkKey& key, RemovalCause cause) override {
    EXPECT_EQ(keys.erase(key), 1u) << "removed while absent";
    ++removed[static_cast<size_t>(cause)];
  }
  void OnCleared() override { ADD_FAILURE() << "the disk tier reports removals one by one"; }

  static uint64_t KeyId(const ChunkKey& key) {
    for (uint64_t id = 0; id < 200; ++id) {
      if (KeyOf(id) == key) return id;
    }
    return 999;
  }

  std::set<ChunkKey> keys;
  std::array<uint64_t, 3> removed{};  // by RemovalCause
};

TEST_P(DiskTierTest, TheObserverSeesEveryChangeOfTheIndexAndNothingElse) {
  MirroringObserver observer;
  options_.capacity_bytes = 4 << 20;
  options_.observer = &observer;
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  constexpr uint64_t kSize = 100000;
  for (uint64_t id = 0; id < 60; ++id) {
    ASSERT_TRUE(PutChunk(**tier, id, kSize).ok()) << id;
    ASSERT_TRUE(ReadChunk(**tier, 0, kSize).ok()) << id;  // kept hot: compacted, not evicted
  }
  ASSERT_TRUE(PutChunk(**tier, 59, kSize).ok());  // already there: no event
  DiskTierStats stats = (*tier)->stats();
  ASSERT_GT(stats.evictions, 0u);
  ASSERT_GT(stats.compacted_segments, 0u);
  EXPECT_EQ(observer.removed[static_cast<size_t>(RemovalCause::kEvicted)], stats.evictions);

  plan_->FlipNextReads(1);
  EXPECT_EQ(ReadChunk(**tier, 59, kSize).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(observer.removed[static_cast<size_t>(RemovalCause::kCorrupt)], 1u);
  ASSERT_TRUE((*tier)->Remove(KeyOf(0)).value());
  // A reader's verdict on bytes that passed their checksum: dropped as corrupt, only while the
  // chunk is what the reader read.
  const ChunkKey victim = *observer.keys.begin();
  const DiskChunkInfo read = *(*tier)->Lookup(victim);
  DiskChunkInfo replaced = read;
  replaced.payload_checksum ^= 1;
  EXPECT_FALSE((*tier)->DropCorrupt(victim, replaced).value());
  EXPECT_TRUE((*tier)->Contains(victim));
  EXPECT_TRUE((*tier)->DropCorrupt(victim, read).value());
  EXPECT_FALSE((*tier)->Contains(victim));
  EXPECT_EQ(observer.removed[static_cast<size_t>(RemovalCause::kCorrupt)], 2u);
  ASSERT_TRUE(
      (*tier)
          ->RemoveIf([](const ChunkKey& key) { return MirroringObserver::KeyId(key) % 2 == 1; })
          .ok());
  EXPECT_GT(observer.removed[static_cast<size_t>(RemovalCause::kRemoved)], 1u);

  std::set<ChunkKey> listed;
  for (const auto& [key, info] : ListAll(**tier, 16)) listed.insert(key);
  EXPECT_EQ(observer.keys, listed);
  EXPECT_EQ(observer.keys.size(), (*tier)->stats().chunks);

  // Opening finds the chunks without telling anyone.
  tier->reset();
  const std::set<ChunkKey> before = observer.keys;
  tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ(observer.keys, before);
  EXPECT_EQ((*tier)->stats().chunks, before.size());
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

TEST_P(DiskTierTest, ReadBatchReadsEachChunkAsReadDoesAndFailsOnlyTheBadOnes) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  constexpr uint64_t kSize = 200000;  // a partial last block: direct reads bounce it
  for (uint64_t id = 0; id < 4; ++id) ASSERT_TRUE(PutChunk(**tier, id, kSize).ok());

  // Chunk 0 into aligned memory (read in place), 1 and 3 into unaligned memory (staged), 9 is
  // not on disk, and 2's destination has the wrong size.
  const std::vector<ChunkKey> keys = {KeyOf(0), KeyOf(1), KeyOf(9), KeyOf(2), KeyOf(3)};
  AlignedBuffer aligned(kSize);
  std::vector<std::byte> unaligned1(kSize + 1), unaligned3(kSize + 1), unused(kSize),
      wrong(kSize - 1);
  const std::span<std::byte> parts[][1] = {{aligned.span().first(kSize)},
                                           {std::span(unaligned1).subspan(1)},
                                           {unused},
                                           {wrong},
                                           {std::span(unaligned3).subspan(1)}};
  const std::vector<MutableParts> destinations = {parts[0], parts[1], parts[2], parts[3], parts[4]};
  // Chunk 0's first request delivers a flipped byte: only chunk 0 fails.
  plan_->FlipNextReads(1);
  std::vector<absl::Status> statuses = (*tier)->ReadBatch(keys, destinations);
  ASSERT_EQ(statuses.size(), keys.size());
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_EQ(statuses[2].code(), absl::StatusCode::kAborted);
  EXPECT_EQ(statuses[3].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(statuses[4].ok()) << statuses[4];
  EXPECT_TRUE(std::ranges::equal(std::span(unaligned1).subspan(1), PayloadOf(1, kSize)));
  EXPECT_TRUE(std::ranges::equal(std::span(unaligned3).subspan(1), PayloadOf(3, kSize)));
  EXPECT_FALSE((*tier)->Contains(KeyOf(0))) << "dropped";
  EXPECT_TRUE((*tier)->Contains(KeyOf(2))) << "a bad destination is the caller's error";
  EXPECT_EQ((*tier)->stats().reads, 2u);
  EXPECT_EQ((*tier)->stats().staged_reads, 2u);

  // Sizes that do not pair up are refused for every chunk.
  statuses = (*tier)->ReadBatch(keys, std::span(destinations).first(2));
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  }
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

TEST_P(DiskTierTest, IndexFilesTakeTheirShareOfTheCapacity) {
  options_.capacity_bytes = 3 * options_.segment_bytes;  // one segment's worth for records
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  const uint64_t index_bytes = (*tier)->stats().index_bytes;
  ASSERT_GT(index_bytes, 0u);
  ASSERT_LT(index_bytes, options_.segment_bytes / 2);
  // A record of a whole segment would fit the segment, but not beside the index.
  EXPECT_EQ(PutChunk(**tier, 1, options_.segment_bytes - kRecordHeaderBytes).code(),
            absl::StatusCode::kResourceExhausted);
  // One that leaves the index its share fits.
  const uint64_t room = AlignDown(options_.segment_bytes - index_bytes) - kRecordHeaderBytes;
  EXPECT_TRUE(PutChunk(**tier, 2, room).ok());
  EXPECT_LE(DirectoryFileBytes(), options_.capacity_bytes);
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
    // The index's files count too.
    ASSERT_LE(DirectoryFileBytes(), options_.capacity_bytes) << id;
    const DiskTierStats stats = (*tier)->stats();
    ASSERT_GT(stats.index_bytes, 0u);
    ASSERT_LE(stats.disk_bytes + stats.index_bytes, options_.capacity_bytes) << id;
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

TEST_P(DiskTierTest, AFullTierWithDeadSpaceSpreadThinEvictsRatherThanCopyingLiveSegments) {
  options_.capacity_bytes = 12 << 20;
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  constexpr uint64_t kSize = 100000;  // 10 records per 1 MiB segment
  uint64_t next = 0;
  for (; next < 100; ++next) ASSERT_TRUE(PutChunk(**tier, next, kSize).ok()) << next;
  uint64_t put_bytes = 0;
  // From now on the coldest chunk (the least recently read) is one per segment: after each Put,
  // every other resident chunk is read, so the LRU victims leave each segment nearly all live.
  for (int round = 0; round < 60; ++round, ++next) {
    ASSERT_TRUE(PutChunk(**tier, next, kSize).ok()) << next;
    put_bytes += kSize;
    for (uint64_t id = 0; id < next; ++id) {
      if (id % 10 != static_cast<uint64_t>(round) % 10 && (*tier)->Contains(KeyOf(id))) {
        ASSERT_TRUE(ReadChunk(**tier, id, kSize).ok()) << id;
      }
    }
  }
  const DiskTierStats stats = (*tier)->stats();
  EXPECT_LE(stats.disk_bytes + stats.index_bytes, options_.capacity_bytes);
  // Copying whichever segment is emptiest would copy ~9 records per record freed here.
  EXPECT_LE(stats.compacted_bytes, 4 * put_bytes) << stats.compacted_segments << " segments";
  EXPECT_EQ(stats.io_errors, 0u);
}

// Payloads and DiskPuts for a PutBatch of chunks `ids` of `size` bytes each.
struct Batch {
  Batch(std::span<const uint64_t> ids, uint64_t size) {
    for (uint64_t id : ids) payloads.push_back(PayloadOf(id, size));
    for (size_t i = 0; i < ids.size(); ++i) parts.push_back(payloads[i]);
    for (size_t i = 0; i < ids.size(); ++i) {
      puts.push_back({.key = KeyOf(ids[i]),
                      .layout_fingerprint = kTestFingerprint,
                      .payload = std::span(&parts[i], 1),
                      .payload_checksum = ChecksumBytes(payloads[i]),
                      .num_tokens = static_cast<uint32_t>(ids[i] % 1000)});
    }
  }
  std::vector<std::vector<std::byte>> payloads;
  std::vector<std::span<const std::byte>> parts;
  std::vector<DiskPut> puts;
};

TEST_P(DiskTierTest, PutBatchStoresEveryChunkAndReportsEachOne) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  // Five chunks over two segments, a duplicate (OK, written once) and one too big for a
  // segment (rejected alone).
  const uint64_t ids[] = {1, 2, 3, 4, 5, 3};
  Batch batch(ids, 300000);
  const std::vector<std::byte> huge(options_.segment_bytes);
  const std::span<const std::byte> huge_part[] = {huge};
  batch.puts.push_back({.key = KeyOf(6), .payload = huge_part});
  const std::vector<absl::Status> statuses = (*tier)->PutBatch(batch.puts);
  ASSERT_EQ(statuses.size(), 7u);
  for (size_t i = 0; i < 6; ++i) EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
  EXPECT_EQ(statuses[6].code(), absl::StatusCode::kInvalidArgument);
  for (uint64_t id = 1; id <= 5; ++id) EXPECT_TRUE(ReadChunk(**tier, id, 300000).ok()) << id;
  EXPECT_FALSE((*tier)->Contains(KeyOf(6)));
  const DiskTierStats stats = (*tier)->stats();
  EXPECT_EQ(stats.writes, 5u);
  EXPECT_GE(stats.segments, 2u);

  // Reopened, the batch's chunks are all indexed.
  tier->reset();
  tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  for (uint64_t id = 1; id <= 5; ++id) EXPECT_TRUE(ReadChunk(**tier, id, 300000).ok()) << id;
  EXPECT_EQ((*tier)->stats().recovered_records, 0u);
}

TEST_P(DiskTierTest, PutBatchFailuresFailOnlyTheirChunks) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  // The first request written is chunk 10's header: only chunk 10 fails.
  plan_->FailNext(IoOp::kWrite, 1, EIO);
  const uint64_t ids[] = {10, 11, 12};
  Batch batch(ids, 20000);
  std::vector<absl::Status> statuses = (*tier)->PutBatch(batch.puts);
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kUnavailable) << statuses[0];
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_TRUE(statuses[2].ok()) << statuses[2];
  EXPECT_FALSE((*tier)->Contains(KeyOf(10)));
  EXPECT_TRUE(ReadChunk(**tier, 11, 20000).ok());
  EXPECT_TRUE(ReadChunk(**tier, 12, 20000).ok());

  // The records of a batch share one fdatasync: when it fails, none of them is acknowledged
  // or visible.
  plan_->FailNextSyncs(1, EIO);
  const uint64_t more[] = {20, 21, 22};
  Batch second(more, 20000);
  statuses = (*tier)->PutBatch(second.puts);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(statuses[i].code(), absl::StatusCode::kUnavailable) << i << ": " << statuses[i];
    EXPECT_FALSE((*tier)->Contains(KeyOf(more[i])));
  }
  EXPECT_EQ((*tier)->stats().io_errors, 4u);
  // Nothing is left half-reserved: the same chunks store now.
  statuses = (*tier)->PutBatch(second.puts);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(statuses[i].ok()) << statuses[i];
  for (uint64_t id : more) EXPECT_TRUE(ReadChunk(**tier, id, 20000).ok()) << id;
}

TEST_P(DiskTierTest, PutBatchLargerThanTheTierStoresInRoundsAndEvicts) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  // 20 records of ~900 KiB against a 14 MiB limit for Puts: the batch cannot be reserved at
  // once; the reserved part is stored, then the rest evicts it.
  std::vector<uint64_t> ids;
  for (uint64_t id = 100; id < 120; ++id) ids.push_back(id);
  Batch batch(ids, 900 << 10);
  const std::vector<absl::Status> statuses = (*tier)->PutBatch(batch.puts);
  for (size_t i = 0; i < statuses.size(); ++i) {
    EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
  }
  EXPECT_TRUE(ReadChunk(**tier, 119, 900 << 10).ok());
  EXPECT_FALSE((*tier)->Contains(KeyOf(100)));
  const DiskTierStats stats = (*tier)->stats();
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_EQ(stats.writes, 20u);
  EXPECT_LE(SegmentFileBytes(), options_.capacity_bytes);
}

TEST_P(DiskTierTest, ConcurrentPutsCommitInGroups) {
  options_.capacity_bytes = 64 << 20;
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  constexpr uint64_t kThreads = 4;
  constexpr uint64_t kPerThread = 25;
  testing::ForIdsOnThreads(kThreads, kPerThread, [&](uint64_t id) {
    EXPECT_TRUE(PutChunk(**tier, id, 4096 + id % 50000).ok()) << id;
  });
  for (uint64_t t = 0; t < kThreads; ++t) {
    for (uint64_t i = 0; i < kPerThread; ++i) {
      const uint64_t id = t * 1000 + i;
      EXPECT_TRUE(ReadChunk(**tier, id, 4096 + id % 50000).ok()) << id;
    }
  }
  EXPECT_EQ((*tier)->stats().writes, kThreads * kPerThread);
  // The watermark written with the last group covers every record: reopening re-indexes none.
  tier->reset();
  tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_EQ((*tier)->stats().chunks, kThreads * kPerThread);
  EXPECT_EQ((*tier)->stats().recovered_records, 0u);
}

TEST_P(DiskTierTest, StoresAndReadsThroughRegisteredMemoryFromManyThreads) {
  auto tier = OpenTier();
  ASSERT_TRUE(tier.ok()) << tier.status();
  // An arena of 4 threads x (source, target) of 64 KiB, registered but for its last 4 KiB: the
  // last thread's reads end with a request across the registration's end (unregistered path).
  constexpr uint64_t kThreads = 4;
  constexpr uint64_t kBytes = 64 << 10;
  AlignedBuffer arena(2 * kThreads * kBytes);
  const std::span<std::byte> regions[] = {arena.span().first(arena.size() - 4096)};
  ASSERT_TRUE((*tier)->RegisterMemory(regions).ok());
  std::vector<std::jthread> threads;
  for (uint64_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::byte* source = arena.data() + 2 * t * kBytes;
      std::byte* target = source + kBytes;
      for (uint64_t round = 0; round < 8; ++round) {
        const uint64_t id = 100 * t + round;
        const std::vector<std::byte> payload = PayloadOf(id, kBytes);
        std::memcpy(source, payload.data(), kBytes);
        const std::span<const std::byte> part[] = {{source, kBytes}};
        ASSERT_TRUE(
            (*tier)->Put(KeyOf(id), kTestFingerprint, part, ChecksumBytes(payload), 1).ok());
        ASSERT_TRUE((*tier)->Read(KeyOf(id), std::span(target, kBytes)).ok()) << id;
        ASSERT_EQ(std::memcmp(target, payload.data(), kBytes), 0) << id;
      }
    });
  }
  threads.clear();
  // Unregistered again: the same memory still serves.
  ASSERT_TRUE((*tier)->RegisterMemory({}).ok());
  EXPECT_TRUE(ReadChunk(**tier, 0, kBytes).ok());
  EXPECT_EQ((*tier)->stats().staged_reads + (*tier)->stats().staged_writes, 0u);
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
