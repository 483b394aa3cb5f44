#include "storage/disk/disk_index.h"

#include <map>

#include "gtest/gtest.h"
#include "storage/host/test_util.h"
#include "storage/io/testing/io_test_util.h"

namespace strata::storage {
namespace {

using testing::ScratchDir;
using testing::SyntheticKey;

IndexEntry EntryFor(uint64_t i) {
  return {.segment_id = i / 10,
          .offset = i * 8192,
          .payload_bytes = i + 1,
          .payload_checksum = i * 31,
          .layout_fingerprint = 77,
          .num_tokens = static_cast<uint32_t>(i)};
}

TEST(DiskIndexTest, EncodedEntriesAndKeptLayoutsSurviveReopen) {
  ScratchDir dir;
  const std::string path = dir.path() + "/index";
  IndexEntry encoded = EntryFor(5);
  encoded.encoding = {.codec = 2, .decoded_bytes = 99999, .decoded_checksum = 0xFEEDu};
  IndexEntry measured = EntryFor(7);  // a version-3 entry: the encoding's errors too
  measured.encoding = {.codec = 1,
                       .decoded_bytes = 4096,
                       .decoded_checksum = 0xBEEFu,
                       .relative_error = 0.0125f,
                       .max_abs_error = 0.5f};
  const KvLayout layout{.model_id = "kept", .num_layers = 2, .num_kv_heads = 1, .head_dim = 64};
  {
    auto index = DiskIndex::Open({.path = path});
    ASSERT_TRUE(index.ok()) << index.status();
    ASSERT_TRUE((*index)->Put(SyntheticKey(77, 5), encoded, {}).ok());
    ASSERT_TRUE((*index)->Put(SyntheticKey(77, 6), EntryFor(6), {}).ok());
    ASSERT_TRUE((*index)->Put(SyntheticKey(77, 7), measured, {}).ok());
    ASSERT_TRUE((*index)->PutLayout(layout).ok());
    ASSERT_TRUE((*index)->PutLayout(layout).ok());  // again: harmless
  }
  auto index = DiskIndex::Open({.path = path});
  ASSERT_TRUE(index.ok()) << index.status();
  std::map<uint64_t, IndexEntry> seen;
  ASSERT_TRUE((*index)
                  ->ForEach([&](const ChunkKey&, const IndexEntry& entry) {
                    seen[entry.num_tokens] = entry;
                  })
                  .ok());
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[5], encoded);
  EXPECT_EQ(seen[5].encoding.relative_error, -1) << "not measured";
  EXPECT_EQ(seen[7], measured);
  EXPECT_EQ(seen[6], EntryFor(6));
  EXPECT_FALSE(seen[6].encoding.encoded());
  absl::StatusOr<std::vector<KvLayout>> layouts = (*index)->Layouts();
  ASSERT_TRUE(layouts.ok()) << layouts.status();
  ASSERT_EQ(layouts->size(), 1u);
  EXPECT_EQ(layouts->front(), layout);
}

TEST(DiskIndexTest, TenantsSurviveReopenWithEveryEncoding) {
  ScratchDir dir;
  const std::string path = dir.path() + "/index";
  IndexEntry plain = EntryFor(1);
  plain.tenant = "tenant-a";
  IndexEntry encoded = EntryFor(2);
  encoded.encoding = {.codec = 2, .decoded_bytes = 99999, .decoded_checksum = 0xFEEDu};
  encoded.tenant = "b";
  IndexEntry measured = EntryFor(3);
  measured.encoding = {.codec = 1,
                       .decoded_bytes = 4096,
                       .decoded_checksum = 0xBEEFu,
                       .relative_error = 0.25f,
                       .max_abs_error = 0.0f};
  measured.tenant = std::string(kMaxRecordTenantBytes, 'x');
  {
    auto index = DiskIndex::Open({.path = path});
    ASSERT_TRUE(index.ok()) << index.status();
    for (const IndexEntry* entry : {&plain, &encoded, &measured}) {
      ASSERT_TRUE((*index)->Put(SyntheticKey(77, entry->num_tokens), *entry, {}).ok());
    }
    ASSERT_TRUE((*index)->Put(SyntheticKey(77, 4), EntryFor(4), {}).ok());
  }
  auto index = DiskIndex::Open({.path = path});
  ASSERT_TRUE(index.ok()) << index.status();
  std::map<uint64_t, IndexEntry> seen;
  absl::StatusOr<DiskIndex::ScanCounts> counts = (*index)->ForEach(
      [&](const ChunkKey&, const IndexEntry& entry) { seen[entry.num_tokens] = entry; });
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->undecodable, 0u);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[1], plain);
  EXPECT_FALSE(seen[1].encoding.encoded());
  EXPECT_EQ(seen[2], encoded);
  EXPECT_EQ(seen[2].encoding.relative_error, -1) << "not measured";
  EXPECT_EQ(seen[3], measured);
  EXPECT_EQ(seen[4], EntryFor(4));
  EXPECT_EQ(seen[4].tenant, "");
}

TEST(DiskIndexTest, EntriesAndWatermarkSurviveReopen) {
  ScratchDir dir;
  const std::string path = dir.path() + "/index";
  {
    auto index = DiskIndex::Open({.path = path});
    ASSERT_TRUE(index.ok()) << index.status();
    EXPECT_EQ((*index)->Watermark().value(), LogPosition{});
    for (uint64_t i = 0; i < 50; ++i) {
      ASSERT_TRUE((*index)->Put(SyntheticKey(77, i), EntryFor(i), {i / 10, i * 8192 + 1}).ok());
    }
    ASSERT_TRUE((*index)->Delete(SyntheticKey(77, 3)).ok());
    ASSERT_TRUE((*index)->Delete(SyntheticKey(77, 999)).ok());
  }
  auto index = DiskIndex::Open({.path = path});
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ((*index)->Watermark().value(), (LogPosition{4, 49 * 8192 + 1}));
  std::map<uint64_t, IndexEntry> seen;
  auto counts = (*index)->ForEach([&](const ChunkKey& key, const IndexEntry& entry) {
    EXPECT_EQ(key, SyntheticKey(77, entry.num_tokens));
    seen[entry.num_tokens] = entry;
  });
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(counts->entries, 49u);
  EXPECT_EQ(counts->undecodable, 0u);
  EXPECT_EQ(seen.count(3), 0u);
  for (const auto& [i, entry] : seen) EXPECT_EQ(entry, EntryFor(i));
  ASSERT_TRUE((*index)->SetWatermark({9, 9}).ok());
  EXPECT_EQ((*index)->Watermark().value(), (LogPosition{9, 9}));
  EXPECT_TRUE((*index)->Sync().ok());
}

TEST(DiskIndexTest, OpenFailsCleanlyOnAnUnusablePath) {
  auto index = DiskIndex::Open({.path = "/proc/strata-no-such-dir/index"});
  EXPECT_FALSE(index.ok());
}

}  // namespace
}  // namespace strata::storage
