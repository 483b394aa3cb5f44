// DiskLowerTier with a codec ([disk] codec): chunks of a noted layout are stored encoded and come
// back exactly as one encode and decode of the codec gives them, described to the store by their
// decoded size and checksum; chunks of other layouts are stored as they are; the layouts the
// disk keeps outlive a restart; a corrupted record fails its chunk alone. Recode (Compress and
// Decompress): a chunk's form swapped in place, with its error measured, while reads go on.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/kv_error.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/disk/disk_tier.h"
#include "storage/host/payload_view.h"
#include "storage/io/testing/io_test_util.h"
#include "storage/tiered/disk_lower_tier.h"

namespace strata::storage {
namespace {

KvLayout EncodedLayout() {
  return {.model_id = "disk-codec",
          .num_layers = 4,
          .num_kv_heads = 2,
          .head_dim = 64,
          .dtype = KvDtype::kBfloat16,
          .chunk_tokens = 32};
}

ChunkKey KeyFor(const KvLayout& layout, uint8_t id) {
  std::array<uint8_t, 16> digest{};
  digest[0] = id;
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, layout.Fingerprint(),
                             digest);
}

class DiskEncodingTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  void Open() {
    tier_.reset();
    disk_.reset();
    absl::StatusOr<std::unique_ptr<DiskTier>> disk = DiskTier::Open(
        {.directory = scratch_.path(), .capacity_bytes = 16 << 20, .segment_bytes = 1 << 20});
    ASSERT_TRUE(disk.ok()) << disk.status();
    disk_ = *std::move(disk);
    tier_ = std::make_unique<DiskLowerTier>(
        disk_.get(), DiskEncodingOptions{.codecs = {.fallback = {.codec = int8_}}});
  }

  absl::Status Put(const ChunkKey& key, std::span<const std::byte> payload, uint32_t tokens) {
    const std::span<const std::byte> parts[] = {payload};
    return tier_->PutOne({.key = key,
                          .payload = parts,
                          .payload_checksum = ChecksumBytes(payload),
                          .num_tokens = tokens});
  }

  // Reads `key` into a destination in three pieces.
  absl::StatusOr<std::vector<std::byte>> Read(const ChunkKey& key, uint64_t bytes) {
    std::vector<std::byte> out(bytes);
    const uint64_t third = bytes / 3;
    const std::span<std::byte> parts[] = {std::span(out).first(third),
                                          std::span(out).subspan(third, third),
                                          std::span(out).subspan(2 * third)};
    const LowerTier::MutableParts destination = parts;
    const absl::Status status = tier_->ReadBatch({&key, 1}, {&destination, 1}).front();
    if (!status.ok()) return status;
    return out;
  }

  const Codec* const int8_ = *CodecRegistry::Find("int8");
  testing::ScratchDir scratch_;
  std::unique_ptr<DiskTier> disk_;
  std::unique_ptr<DiskLowerTier> tier_;
};

TEST_F(DiskEncodingTest, ANotedLayoutsChunksAreStoredEncodedAndComeBackAsTheCodecDecodesThem) {
  const KvLayout layout = EncodedLayout();
  tier_->NoteLayout(layout);
  const std::vector<std::byte> chunk = testing::MakeKv(layout, 32, testing::KvShape::kShaped, 1);
  const ChunkKey key = KeyFor(layout, 1);
  ASSERT_TRUE(Put(key, chunk, 32).ok());

  // What one encode and decode gives: the bytes a read must deliver, and their checksum.
  std::vector<std::byte> expected(chunk.size());
  ASSERT_TRUE(int8_->Decode(layout, *int8_->Encode(layout, 32, chunk, {}), expected).ok());
  const std::optional<LowerTier::ChunkInfo> info = tier_->Lookup(key);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->payload_bytes, chunk.size());
  EXPECT_EQ(info->payload_checksum, ChecksumBytes(expected));
  EXPECT_EQ(info->num_tokens, 32u);
  // Its error, measured as it was written.
  const KvError error = CompareKv(layout.dtype, chunk, expected);
  ASSERT_TRUE(info->error.has_value());
  EXPECT_GT(error.relative_frobenius, 0);
  EXPECT_FLOAT_EQ(info->error->relative_frobenius, error.relative_frobenius);
  EXPECT_FLOAT_EQ(info->error->max_abs, error.max_abs);
  const std::optional<DiskChunkInfo> stored = disk_->Lookup(key);
  ASSERT_TRUE(stored.has_value());
  EXPECT_TRUE(stored->encoding.encoded());
  EXPECT_LT(stored->payload_bytes * 18, chunk.size() * 10) << "int8 of bf16, head_dim 64: 1.88x";

  absl::StatusOr<std::vector<std::byte>> read = Read(key, chunk.size());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, expected);
  EXPECT_NE(*read, chunk) << "int8 is lossy: the test data is not exactly representable";

  const LowerTierStats stats = tier_->Stats();
  EXPECT_EQ(stats.encoded_chunks, 1u);
  EXPECT_EQ(stats.payload_bytes, chunk.size());
  EXPECT_EQ(stats.stored_bytes, stored->payload_bytes);

  // The listing describes it as the store sees it.
  absl::StatusOr<LowerTier::ListPage> page = tier_->List({});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->chunks.size(), 1u);
  EXPECT_EQ(page->chunks[0].info.payload_checksum, ChecksumBytes(expected));

  // A destination of another size is refused.
  EXPECT_EQ(Read(key, chunk.size() - 6).status().code(), absl::StatusCode::kInvalidArgument);
}

// DiskEncodingOptions::codecs.tenants: a named tenant's chunks by its own encoding, every other
// chunk (no tenant, or a tenant not named) by the fallback, here none.
TEST_F(DiskEncodingTest, ATenantsOwnEncodingReplacesTheFallbackForItsChunksOnly) {
  const Codec* kivi4 = *CodecRegistry::Find("kivi4");
  tier_ = std::make_unique<DiskLowerTier>(
      disk_.get(),
      DiskEncodingOptions{
          .codecs = {.tenants = {{"bulk", {.codec = kivi4, .params = {.group_size = 16}}},
                                 {"exact", {}}}}});
  const KvLayout layout = EncodedLayout();
  tier_->NoteLayout(layout);
  const std::vector<std::byte> chunk = testing::MakeKv(layout, 32, testing::KvShape::kShaped, 3);
  const std::string_view tenants[] = {"bulk", "", "exact", "other"};
  for (uint64_t i = 0; i < std::size(tenants); ++i) {
    const std::span<const std::byte> parts[] = {chunk};
    ASSERT_TRUE(tier_
                    ->PutOne({.key = KeyFor(layout, 10 + i),
                              .payload = parts,
                              .payload_checksum = ChecksumBytes(chunk),
                              .num_tokens = 32,
                              .tenant = tenants[i]})
                    .ok());
  }
  std::vector<std::byte> expected(chunk.size());
  ASSERT_TRUE(
      kivi4->Decode(layout, *kivi4->Encode(layout, 32, chunk, {.group_size = 16}), expected).ok());
  EXPECT_EQ(tier_->Lookup(KeyFor(layout, 10))->codec, CodecId::kKivi4);
  EXPECT_EQ(*Read(KeyFor(layout, 10), chunk.size()), expected);
  for (uint64_t i = 1; i < std::size(tenants); ++i) {
    EXPECT_EQ(tier_->Lookup(KeyFor(layout, 10 + i))->codec, std::nullopt) << tenants[i];
    EXPECT_EQ(*Read(KeyFor(layout, 10 + i), chunk.size()), chunk) << tenants[i];
  }
}

// An encoding whose codec refuses a layout's parameters is named in a warning, once per layout,
// when the layout is noted (an engine's handshake); its chunks are stored as they are.
TEST_F(DiskEncodingTest, EncodingsThatRefuseANotedLayoutAreLoggedOnce) {
  std::ostringstream log;
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  absl::Cleanup restore = [&previous] { spdlog::set_default_logger(previous); };
  const Codec* kivi4 = *CodecRegistry::Find("kivi4");
  tier_ = std::make_unique<DiskLowerTier>(
      disk_.get(),
      DiskEncodingOptions{
          .codecs = {
              .fallback = {.codec = int8_, .params = {.group_size = 16}},  // int8 takes none
              .tenants = {{"bulk", {.codec = kivi4, .params = {.group_size = 48}}},  // 128 channels
                          {"fine", {.codec = kivi4, .params = {.group_size = 32}}}}}});
  const KvLayout layout = EncodedLayout();
  tier_->NoteLayout(layout);
  tier_->NoteLayout(layout);
  const std::string text = log.str();
  EXPECT_THAT(text, ::testing::HasSubstr("the codec int8 refuses"));
  EXPECT_THAT(text, ::testing::HasSubstr("tenant 'bulk''s codec kivi4 refuses"));
  EXPECT_THAT(text, ::testing::Not(::testing::HasSubstr("'fine'")));
  size_t warnings = 0;
  for (size_t at = text.find("refuses"); at != std::string::npos; at = text.find("refuses", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 2u) << text;

  const std::vector<std::byte> chunk = testing::MakeKv(layout, 32, testing::KvShape::kShaped, 4);
  ASSERT_TRUE(Put(KeyFor(layout, 4), chunk, 32).ok());
  EXPECT_EQ(tier_->Lookup(KeyFor(layout, 4))->codec, std::nullopt);
  EXPECT_EQ(*Read(KeyFor(layout, 4), chunk.size()), chunk);
}

TEST_F(DiskEncodingTest, ChunksOfLayoutsNotNotedOrThatDoNotShrinkAreStoredAsTheyAre) {
  const KvLayout layout = EncodedLayout();
  const std::vector<std::byte> chunk = testing::MakeKv(layout, 32, testing::KvShape::kShaped, 2);
  ASSERT_TRUE(Put(KeyFor(layout, 2), chunk, 32).ok());  // layout not noted
  EXPECT_FALSE(disk_->Lookup(KeyFor(layout, 2))->encoding.encoded());
  EXPECT_EQ(*Read(KeyFor(layout, 2), chunk.size()), chunk);

  // fp32 with head_dim 4: the int8 frame's scales and table outweigh what it saves.
  KvLayout tiny = layout;
  tiny.dtype = KvDtype::kFloat32;
  tiny.head_dim = 4;
  tiny.num_kv_heads = 1;
  tiny.num_layers = 1;
  tiny.chunk_tokens = 1;
  tier_->NoteLayout(tiny);
  const std::vector<std::byte> small = testing::MakeKv(tiny, 1, testing::KvShape::kGaussian, 3);
  ASSERT_TRUE(Put(KeyFor(tiny, 3), small, 1).ok());
  EXPECT_FALSE(disk_->Lookup(KeyFor(tiny, 3))->encoding.encoded());
  EXPECT_EQ(*Read(KeyFor(tiny, 3), small.size()), small);

  // A payload whose size is not the layout's for its tokens is stored as it is too.
  tier_->NoteLayout(layout);
  const std::vector<std::byte> odd(1000, std::byte{7});
  ASSERT_TRUE(Put(KeyFor(layout, 4), odd, 32).ok());
  EXPECT_FALSE(disk_->Lookup(KeyFor(layout, 4))->encoding.encoded());
  EXPECT_EQ(tier_->Stats().encoded_chunks, 0u);
}

TEST_F(DiskEncodingTest, EncodedChunksDecodeAfterARestartWhateverTheCodecIsThen) {
  const KvLayout layout = EncodedLayout();
  tier_->NoteLayout(layout);
  const std::vector<std::byte> chunk = testing::MakeKv(layout, 20, testing::KvShape::kShaped, 4);
  ASSERT_TRUE(Put(KeyFor(layout, 5), chunk, 20).ok());  // a partial chunk
  absl::StatusOr<std::vector<std::byte>> before = Read(KeyFor(layout, 5), chunk.size());
  ASSERT_TRUE(before.ok()) << before.status();

  Open();
  tier_ = std::make_unique<DiskLowerTier>(disk_.get());  // no codec now, no layout noted
  ASSERT_NE(disk_->KeptLayout(layout.Fingerprint()), nullptr);
  absl::StatusOr<std::vector<std::byte>> after = Read(KeyFor(layout, 5), chunk.size());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(*after, *before);
  EXPECT_EQ(tier_->Stats().encoded_chunks, 1u);
}

TEST_F(DiskEncodingTest, ACorruptedEncodedRecordFailsItsChunkAloneAndIsDropped) {
  const KvLayout layout = EncodedLayout();
  tier_->NoteLayout(layout);
  const std::vector<std::byte> a = testing::MakeKv(layout, 32, testing::KvShape::kShaped, 6);
  const std::vector<std::byte> b = testing::MakeKv(layout, 32, testing::KvShape::kShaped, 7);
  ASSERT_TRUE(Put(KeyFor(layout, 6), a, 32).ok());
  ASSERT_TRUE(Put(KeyFor(layout, 7), b, 32).ok());
  // Flip a byte inside the first record's frame (the segment's first record).
  const std::optional<DiskChunkInfo> first = disk_->Lookup(KeyFor(layout, 6));
  ASSERT_TRUE(first.has_value());
  std::filesystem::path segment;
  for (const auto& entry : std::filesystem::directory_iterator(scratch_.path())) {
    if (entry.path().extension() == ".log") segment = entry.path();
  }
  ASSERT_FALSE(segment.empty());
  {
    std::FILE* file = std::fopen(segment.c_str(), "r+b");
    ASSERT_NE(file, nullptr);
    std::fseek(file, 4096 + 200, SEEK_SET);
    const int byte = std::fgetc(file);
    std::fseek(file, 4096 + 200, SEEK_SET);
    std::fputc(byte ^ 0x40, file);
    std::fclose(file);
  }
  // One batch: the corrupted chunk, the intact one and one never stored.
  const ChunkKey keys[] = {KeyFor(layout, 6), KeyFor(layout, 7), KeyFor(layout, 8)};
  std::vector<std::byte> out_a(a.size()), out_b(b.size()), out_c(a.size());
  const std::span<std::byte> pa[] = {out_a}, pb[] = {out_b}, pc[] = {out_c};
  const LowerTier::MutableParts destinations[] = {pa, pb, pc};
  const std::vector<absl::Status> statuses = tier_->ReadBatch(keys, destinations);
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_EQ(statuses[2].code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(tier_->Contains(keys[0]));
  EXPECT_EQ(ChecksumBytes(out_b), tier_->Lookup(keys[1])->payload_checksum);
}

// What a chunk becomes through one encode and decode of `codec` with default parameters.
std::vector<std::byte> RoundTrip(const Codec& codec, const KvLayout& layout, uint32_t tokens,
                                 const std::vector<std::byte>& chunk) {
  std::vector<std::byte> out(chunk.size());
  EXPECT_TRUE(codec.Decode(layout, *codec.Encode(layout, tokens, chunk, {}), out).ok());
  return out;
}

// ReadBatch reads encoded chunks in windows and decodes them on the decode threads (none: on
// the reader) while it reads on: whatever the threads, each chunk of a mixed batch comes back as
// it would alone, and each failure stays its own.
TEST_F(DiskEncodingTest, ABatchDecodesOnTheDecodeThreadsAndEachChunkComesBackAsAlone) {
  const KvLayout layout = EncodedLayout();
  KvLayout plain_layout = layout;  // never noted: its chunks are stored as they are
  plain_layout.model_id = "disk-plain";
  std::vector<std::vector<std::byte>> chunks;
  for (uint8_t i = 0; i < 9; ++i) {
    chunks.push_back(testing::MakeKv(layout, 32, testing::KvShape::kShaped, 40 + i));
  }
  for (const uint32_t threads : {0u, 1u, 3u}) {
    SCOPED_TRACE(threads);
    tier_ = std::make_unique<DiskLowerTier>(
        disk_.get(),
        DiskEncodingOptions{.codecs = {.fallback = {.codec = int8_}}, .decode_threads = threads});
    tier_->NoteLayout(layout);
    // Chunks 0-6 encoded, 7 and 8 plain; read with one never stored between them, and chunk 6
    // into a destination too small.
    std::vector<ChunkKey> keys;
    for (uint8_t i = 0; i < 7; ++i) keys.push_back(KeyFor(layout, 40 + i));
    keys.push_back(KeyFor(plain_layout, 47));
    keys.push_back(KeyFor(plain_layout, 48));
    for (size_t i = 0; i < keys.size(); ++i) ASSERT_TRUE(Put(keys[i], chunks[i], 32).ok());
    ASSERT_TRUE(disk_->Lookup(keys[0])->encoding.encoded());
    ASSERT_FALSE(disk_->Lookup(keys[7])->encoding.encoded());
    const std::vector<size_t> order = {0, 7, 1, 2, 9, 3, 8, 4, 5, 6};
    std::vector<ChunkKey> batch;
    std::vector<std::vector<std::byte>> outs;
    for (size_t i : order) {
      batch.push_back(i < keys.size() ? keys[i] : KeyFor(layout, 99));
      outs.emplace_back(chunks[0].size() - (i == 6 ? 2 : 0));
    }
    std::vector<std::span<std::byte>> parts(outs.begin(), outs.end());
    std::vector<LowerTier::MutableParts> destinations;
    for (std::span<std::byte>& part : parts) destinations.emplace_back(&part, 1);
    const std::vector<absl::Status> statuses = tier_->ReadBatch(batch, destinations);
    ASSERT_EQ(statuses.size(), order.size());
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t i = order[k];
      SCOPED_TRACE(i);
      if (i == 9) {
        EXPECT_EQ(statuses[k].code(), absl::StatusCode::kAborted);
      } else if (i == 6) {
        EXPECT_EQ(statuses[k].code(), absl::StatusCode::kInvalidArgument);
      } else {
        ASSERT_TRUE(statuses[k].ok()) << statuses[k];
        EXPECT_EQ(outs[k], i < 7 ? RoundTrip(*int8_, layout, 32, chunks[i]) : chunks[i]);
      }
    }
    for (const ChunkKey& key : keys) ASSERT_TRUE(*tier_->Remove(key));
  }
}

TEST_F(DiskEncodingTest, RecodeCompressesAChunkInPlaceAndDecompressesIt) {
  tier_ = std::make_unique<DiskLowerTier>(disk_.get());  // Compress needs no [disk] codec
  const KvLayout layout = EncodedLayout();
  tier_->NoteLayout(layout);
  const std::vector<std::byte> chunk = testing::MakeKv(layout, 32, testing::KvShape::kShaped, 9);
  const ChunkKey key = KeyFor(layout, 9);
  ASSERT_TRUE(Put(key, chunk, 32).ok());
  EXPECT_FALSE(tier_->Lookup(key)->codec.has_value());
  EXPECT_EQ(tier_->Lookup(key)->stored_bytes, chunk.size());

  absl::StatusOr<LowerTier::RecodeResult> compressed = tier_->Recode(key, {.codec = int8_});
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  EXPECT_EQ(compressed->outcome, LowerTier::RecodeOutcome::kRecoded);
  EXPECT_EQ(compressed->stored_bytes_before, chunk.size());
  EXPECT_LT(compressed->stored_bytes_after * 18, chunk.size() * 10);
  const std::vector<std::byte> expected = RoundTrip(*int8_, layout, 32, chunk);
  const KvError error = CompareKv(layout.dtype, chunk, expected);
  EXPECT_GT(compressed->error.relative_frobenius, 0);
  EXPECT_DOUBLE_EQ(compressed->error.relative_frobenius, error.relative_frobenius);
  EXPECT_DOUBLE_EQ(compressed->error.max_abs, error.max_abs);
  EXPECT_LT(compressed->error.relative_frobenius, 0.05) << "int8 of shaped KV: about 1%";

  std::optional<LowerTier::ChunkInfo> info = tier_->Lookup(key);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->codec, CodecId::kInt8);
  EXPECT_EQ(info->stored_bytes, compressed->stored_bytes_after);
  EXPECT_EQ(info->payload_bytes, chunk.size());
  EXPECT_EQ(info->payload_checksum, ChecksumBytes(expected));
  ASSERT_TRUE(info->error.has_value()) << "the measured error is kept with the chunk";
  EXPECT_FLOAT_EQ(info->error->relative_frobenius, error.relative_frobenius);
  EXPECT_FLOAT_EQ(info->error->max_abs, error.max_abs);
  EXPECT_EQ(*Read(key, chunk.size()), expected);
  EXPECT_EQ(tier_->Stats().encoded_chunks, 1u);

  // Encoded already: another codec leaves it as it is (decompress first).
  const Codec* kivi4 = *CodecRegistry::Find("kivi4");
  compressed = tier_->Recode(key, {.codec = kivi4});
  ASSERT_TRUE(compressed.ok());
  EXPECT_EQ(compressed->outcome, LowerTier::RecodeOutcome::kAlreadyInForm);
  EXPECT_EQ(tier_->Lookup(key)->codec, CodecId::kInt8);

  // Decompressed: stored as it decodes, the same bytes and checksum, exactly.
  absl::StatusOr<LowerTier::RecodeResult> decompressed = tier_->Recode(key, {});
  ASSERT_TRUE(decompressed.ok()) << decompressed.status();
  EXPECT_EQ(decompressed->outcome, LowerTier::RecodeOutcome::kRecoded);
  EXPECT_EQ(decompressed->stored_bytes_after, chunk.size());
  EXPECT_EQ(decompressed->error.relative_frobenius, 0);
  info = tier_->Lookup(key);
  EXPECT_FALSE(info->codec.has_value());
  EXPECT_FALSE(info->error.has_value());
  EXPECT_EQ(info->payload_checksum, ChecksumBytes(expected));
  EXPECT_EQ(*Read(key, chunk.size()), expected);
  EXPECT_EQ(tier_->Recode(key, {})->outcome, LowerTier::RecodeOutcome::kAlreadyInForm);

  // Compressed again, it stays so across a restart.
  ASSERT_EQ(tier_->Recode(key, {.codec = int8_})->outcome, LowerTier::RecodeOutcome::kRecoded);
  const uint64_t checksum = tier_->Lookup(key)->payload_checksum;
  Open();
  EXPECT_EQ(tier_->Lookup(key)->codec, CodecId::kInt8);
  EXPECT_TRUE(tier_->Lookup(key)->error.has_value()) << "kept in the index across a restart";
  EXPECT_EQ(ChecksumBytes(*Read(key, chunk.size())), checksum);
}

// KV holding a NaN has a NaN for its measured error; its record still matches itself, so it can
// be recoded again and dropped as corrupt (a NaN compared unequal to itself once, which made every
// later Replace see a changed chunk).
TEST_F(DiskEncodingTest, AChunkWhoseMeasuredErrorIsNaNCanBeRecodedAgain) {
  const KvLayout layout = EncodedLayout();
  std::vector<std::byte> chunk = testing::MakeKv(layout, 32, testing::KvShape::kShaped, 30);
  const uint16_t nan_bits = 0x7fc0;  // a bf16 quiet NaN
  std::memcpy(chunk.data() + 64, &nan_bits, sizeof(nan_bits));
  const ChunkKey key = KeyFor(layout, 30);
  ASSERT_TRUE(Put(key, chunk, 32).ok());  // layout not noted: stored as it is
  absl::StatusOr<LowerTier::RecodeResult> compressed =
      tier_->Recode(key, {.codec = int8_, .layout = &layout});
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  ASSERT_EQ(compressed->outcome, LowerTier::RecodeOutcome::kRecoded);
  EXPECT_TRUE(std::isnan(compressed->error.relative_frobenius));
  const std::optional<DiskChunkInfo> stored = disk_->Lookup(key);
  ASSERT_TRUE(stored.has_value());
  EXPECT_TRUE(std::isnan(stored->encoding.relative_error));
  EXPECT_EQ(*stored, *disk_->Lookup(key));
  // The store is told the NaN, not "not measured".
  const std::optional<LowerTier::ChunkInfo> info = tier_->Lookup(key);
  ASSERT_TRUE(info.has_value() && info->error.has_value());
  EXPECT_TRUE(std::isnan(info->error->relative_frobenius));

  absl::StatusOr<LowerTier::RecodeResult> decompressed = tier_->Recode(key, {});
  ASSERT_TRUE(decompressed.ok()) << decompressed.status();
  EXPECT_EQ(decompressed->outcome, LowerTier::RecodeOutcome::kRecoded);
  ASSERT_EQ(tier_->Recode(key, {.codec = int8_})->outcome, LowerTier::RecodeOutcome::kRecoded);
  EXPECT_TRUE(*disk_->DropCorrupt(key, *disk_->Lookup(key)));
  EXPECT_FALSE(tier_->Contains(key));
}

TEST_F(DiskEncodingTest, RecodeLeavesWhatItCannotEncodeAndRefusesBadParameters) {
  tier_ = std::make_unique<DiskLowerTier>(disk_.get());
  const KvLayout layout = EncodedLayout();
  const std::vector<std::byte> chunk = testing::MakeKv(layout, 32, testing::KvShape::kShaped, 10);
  const ChunkKey key = KeyFor(layout, 10);
  ASSERT_TRUE(Put(key, chunk, 32).ok());  // no engine announced the layout

  EXPECT_EQ(tier_->Recode(KeyFor(layout, 11), {.codec = int8_})->outcome,
            LowerTier::RecodeOutcome::kMissing);
  EXPECT_EQ(tier_->Recode(key, {.codec = int8_})->outcome, LowerTier::RecodeOutcome::kNoLayout);
  KvLayout other = layout;
  other.model_id = "another";
  EXPECT_EQ(tier_->Recode(key, {.codec = int8_, .layout = &other})->outcome,
            LowerTier::RecodeOutcome::kNoLayout)
      << "a layout of another fingerprint is not the chunk's";
  // A payload whose size is not its layout's for its tokens cannot be the layout's KV.
  const std::vector<std::byte> odd(1000, std::byte{7});
  ASSERT_TRUE(Put(KeyFor(layout, 12), odd, 32).ok());
  EXPECT_EQ(tier_->Recode(KeyFor(layout, 12), {.codec = int8_, .layout = &layout})->outcome,
            LowerTier::RecodeOutcome::kNoLayout);

  // int8 takes no bits: refused, and the chunk is untouched.
  const std::optional<LowerTier::ChunkInfo> before = tier_->Lookup(key);
  absl::StatusOr<LowerTier::RecodeResult> refused =
      tier_->Recode(key, {.codec = int8_, .params = {.bits = 4}, .layout = &layout});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_EQ(tier_->Lookup(key)->payload_checksum, before->payload_checksum);
  EXPECT_FALSE(tier_->Lookup(key)->codec.has_value());

  // Given the chunk's layout, it is encoded, and the disk keeps the layout from then on.
  absl::StatusOr<LowerTier::RecodeResult> done =
      tier_->Recode(key, {.codec = int8_, .layout = &layout});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->outcome, LowerTier::RecodeOutcome::kRecoded);
  EXPECT_NE(disk_->KeptLayout(layout.Fingerprint()), nullptr);
  EXPECT_EQ(*Read(key, chunk.size()), RoundTrip(*int8_, layout, 32, chunk));
}

TEST_F(DiskEncodingTest, ReadsDuringRecodeGetTheOldFormOrTheNewNeverAMix) {
  tier_ = std::make_unique<DiskLowerTier>(disk_.get());
  const KvLayout layout = EncodedLayout();
  tier_->NoteLayout(layout);
  constexpr uint8_t kChunks = 3;
  // What each chunk may read as: as stored, after one compression, after a second one (a
  // decompressed chunk holds its first decode, which the second compression starts from).
  std::vector<std::vector<std::vector<std::byte>>> forms(kChunks);
  for (uint8_t id = 0; id < kChunks; ++id) {
    const std::vector<std::byte> chunk =
        testing::MakeKv(layout, 32, testing::KvShape::kShaped, 20 + id);
    ASSERT_TRUE(Put(KeyFor(layout, id), chunk, 32).ok());
    const std::vector<std::byte> once = RoundTrip(*int8_, layout, 32, chunk);
    forms[id] = {chunk, once, RoundTrip(*int8_, layout, 32, once)};
  }
  const uint64_t bytes = forms[0][0].size();
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, wrong{0};
  std::thread reader([&] {
    for (int i = 0; i < 20000 && !done.load(); ++i) {
      const uint8_t id = static_cast<uint8_t>(i % kChunks);
      absl::StatusOr<std::vector<std::byte>> got = Read(KeyFor(layout, id), bytes);
      if (got.status().code() == absl::StatusCode::kAborted) continue;  // swapped meanwhile
      const auto& allowed = forms[id];
      if (!got.ok() || std::find(allowed.begin(), allowed.end(), *got) == allowed.end()) ++wrong;
      ++reads;
    }
  });
  for (int round = 0; round < 2; ++round) {
    for (uint8_t id = 0; id < kChunks; ++id) {
      absl::StatusOr<LowerTier::RecodeResult> r = tier_->Recode(KeyFor(layout, id), {int8_});
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->outcome, LowerTier::RecodeOutcome::kRecoded);
      r = tier_->Recode(KeyFor(layout, id), {});
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->outcome, LowerTier::RecodeOutcome::kRecoded);
    }
  }
  done = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(disk_->stats().checksum_failures, 0u);
}

}  // namespace
}  // namespace strata::storage
