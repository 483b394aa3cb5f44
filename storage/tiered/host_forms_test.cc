// Host chunks compressed in place (TieredStore::Recode of Tier::kHost, HostForms): loads find
// them decoded back before they lease them; a chunk engines read stays as it is (busy); a frame
// that does not decode fails its load and goes; tiers below are given the decoded chunk, never
// the frame (eviction, flush); loads running through Compress and Decompress get whole chunks.
#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/kv_error.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/tiered/host_forms.h"
#include "storage/tiered/testing/store_test_base.h"

namespace strata::storage {
namespace {

using testing::kChunkBytes;

// The reader that decodes frames of `codec` itself.
CodecSet Decodes(CodecId codec) { return CodecSet().Add(static_cast<uint32_t>(codec)); }

class HostFormsTest : public testing::TieredStoreTestBase {
 protected:
  // KV shaped as a model's (outlier key channels, per-token value scales), so a codec's error
  // means something.
  std::vector<std::byte> Kv(uint64_t id) const {
    return testing::MakeKv(layout_, 16, testing::KvShape::kShaped, id);
  }

  void StoreKv(uint64_t id, std::optional<std::string_view> tenant = std::nullopt) {
    absl::StatusOr<ReserveResult> reserved =
        store_->host().Reserve(layout_, Key(id), {.num_tokens = 16, .tenant_name = tenant});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    ASSERT_EQ(reserved->outcome, ReserveOutcome::kReserved);
    reserved->reservation.payload().CopyFrom(Kv(id));
    ASSERT_TRUE(store_->host().Commit(std::move(reserved->reservation)).ok());
  }

  absl::StatusOr<RecodeTotals> Compress(const std::vector<ChunkKey>& keys,
                                        const KvLayout* layout = nullptr) {
    return store_->Recode(keys, Tier::kHost,
                          {.codec = *CodecRegistry::Find("int8"), .layout = layout});
  }
  absl::StatusOr<RecodeTotals> Decompress(const std::vector<ChunkKey>& keys) {
    return store_->Recode(keys, Tier::kHost, {});
  }

  static std::vector<std::byte> Bytes(const PayloadView& payload) {
    std::vector<std::byte> bytes(payload.size_bytes());
    payload.CopyTo(bytes);
    return bytes;
  }

  // The relative error of chunk `id` as `bytes` hold it.
  double ErrorOf(uint64_t id, std::span<const std::byte> bytes) const {
    return CompareKv(layout_.dtype, Kv(id), bytes).relative_frobenius;
  }

  // The form the host tier keeps for `key` (a default one for a plain or absent chunk).
  StoredEncoding FormOf(const ChunkKey& key) const {
    for (const ChunkInfo& info : store_->host().ListChunks({}).chunks) {
      if (info.key == key) return info.encoding;
    }
    return {};
  }
};

TEST_F(HostFormsTest, CompressedChunksAreDecodedInPlaceBeforeALoadLeasesThem) {
  Open(/*with_disk=*/false);
  ASSERT_TRUE(store_->NoteLayout(layout_).ok());
  for (uint64_t id = 0; id < 3; ++id) StoreKv(id);
  absl::StatusOr<RecodeTotals> totals = Compress(Keys(0, 3));
  ASSERT_TRUE(totals.ok()) << totals.status();
  EXPECT_EQ(totals->recoded, 3u);
  EXPECT_EQ(totals->stored_bytes_before, 3 * kChunkBytes);
  EXPECT_LT(totals->stored_bytes_after, 3 * kChunkBytes * 7 / 10);  // 16-wide heads: 0.65x
  EXPECT_GT(totals->max_error.relative_frobenius, 0);
  EXPECT_LT(totals->max_error.relative_frobenius, 0.01);
  HostTierStats host = store_->host().Stats();
  EXPECT_EQ(host.encoded_chunks, 3u);
  EXPECT_EQ(host.encoded_decoded_bytes, 3 * kChunkBytes);
  EXPECT_TRUE(store_->host().CheckConsistency().ok());
  const StoredEncoding form = FormOf(Key(1));
  ASSERT_TRUE(form.encoded());
  EXPECT_FLOAT_EQ(
      form.relative_error, ErrorOf(1, [&] {
        std::vector<std::byte> decoded(kChunkBytes);
        const Codec& int8 = **CodecRegistry::Find("int8");
        EXPECT_TRUE(int8.Decode(layout_, *int8.Encode(layout_, 16, Kv(1), {}), decoded).ok());
        return decoded;
      }()));

  // Still cached, so a lookup counts it; the load decodes it on the loads thread.
  EXPECT_EQ(store_->LocatePrefix(Keys(0, 3)).size(), 3u);
  bool deferred = false;
  LoadLeases leased = Load(Keys(0, 3), deferred);
  EXPECT_TRUE(deferred);
  ASSERT_TRUE(leased.failure.ok()) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 3u);
  for (uint64_t id = 0; id < 3; ++id) {
    const ChunkLease& lease = leased.leases[id];
    EXPECT_FALSE(lease.encoding().encoded());
    const std::vector<std::byte> bytes = Bytes(lease.payload());
    EXPECT_EQ(ChecksumBytes(bytes), lease.checksum());
    EXPECT_LT(ErrorOf(id, bytes), 0.01) << id;
  }
  EXPECT_EQ(ChecksumBytes(Bytes(leased.leases[1].payload())), form.decoded_checksum);
  leased.leases.clear();
  EXPECT_EQ(store_->Stats().movement.load_decoded, 3u);
  EXPECT_EQ(store_->host().Stats().encoded_chunks, 0u);
  // Plain again: the next load is a host hit at once.
  leased = Load(Keys(0, 3), deferred);
  EXPECT_FALSE(deferred);
  EXPECT_EQ(leased.leases.size(), 3u);
}

TEST_F(HostFormsTest, AReaderThatDecodesACodecLeasesItsChunksAsTheyAreHeld) {
  Open(/*with_disk=*/false);
  ASSERT_TRUE(store_->NoteLayout(layout_).ok());
  for (uint64_t id = 0; id < 3; ++id) StoreKv(id);
  ASSERT_TRUE(Compress(Keys(1, 1)).ok());
  const StoredEncoding form = FormOf(Key(1));
  ASSERT_TRUE(form.encoded());
  const CodecSet int8 = Decodes(CodecId::kInt8);
  const uint64_t hits = store_->host().Stats().hits;

  // A reader of int8: the frame is leased at once, as it is held, and counted as a load.
  bool deferred = true;
  LoadLeases leased = Load(Keys(0, 3), deferred, int8);
  EXPECT_FALSE(deferred);
  ASSERT_TRUE(leased.failure.ok()) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 3u);
  EXPECT_FALSE(leased.leases[0].encoding().encoded());
  EXPECT_EQ(leased.leases[1].encoding(), form);
  const std::vector<std::byte> frame = Bytes(leased.leases[1].payload());
  EXPECT_EQ(ChecksumBytes(frame), leased.leases[1].checksum());
  std::vector<std::byte> decoded(kChunkBytes);
  ASSERT_TRUE((*CodecRegistry::Find("int8"))->Decode(layout_, frame, decoded).ok());
  EXPECT_EQ(ChecksumBytes(decoded), form.decoded_checksum);
  EXPECT_LT(ErrorOf(1, decoded), 0.01);
  leased.leases.clear();
  EXPECT_EQ(store_->host().Stats().hits, hits + 3);
  EXPECT_EQ(store_->Stats().movement.load_encoded, 1u);
  EXPECT_EQ(store_->Stats().movement.load_decoded, 0u);
  EXPECT_EQ(store_->host().Stats().encoded_chunks, 1u) << "the chunk stays compressed";

  // A reader of other codecs only: the daemon decodes the chunk back in place first.
  leased = Load(Keys(0, 3), deferred, Decodes(CodecId::kKivi4));
  EXPECT_TRUE(deferred);
  ASSERT_TRUE(leased.failure.ok()) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 3u);
  EXPECT_FALSE(leased.leases[1].encoding().encoded());
  EXPECT_EQ(ChecksumBytes(Bytes(leased.leases[1].payload())), form.decoded_checksum);
  leased.leases.clear();
  EXPECT_EQ(store_->Stats().movement.load_encoded, 1u);
  EXPECT_EQ(store_->Stats().movement.load_decoded, 1u);
  EXPECT_TRUE(store_->host().CheckConsistency().ok());
}

TEST_F(HostFormsTest, DecompressRestoresThePlainFormAndEachFormIsRecodedOnce) {
  Open(/*with_disk=*/false);
  StoreKv(0);
  // No engine announced the layout: the chunk is left as it is, unless the call names it.
  absl::StatusOr<RecodeTotals> totals = Compress(Keys(0, 1));
  ASSERT_TRUE(totals.ok()) << totals.status();
  EXPECT_EQ(totals->no_layout, 1u);
  totals = Compress(Keys(0, 1), &layout_);
  ASSERT_TRUE(totals.ok()) << totals.status();
  EXPECT_EQ(totals->recoded, 1u);
  totals = Compress(Keys(0, 3), &layout_);
  ASSERT_TRUE(totals.ok()) << totals.status();
  EXPECT_EQ(totals->already_in_form, 1u);
  EXPECT_EQ(totals->missing, 2u);
  const StoredEncoding form = FormOf(Key(0));

  totals = Decompress(Keys(0, 1));
  ASSERT_TRUE(totals.ok()) << totals.status();
  EXPECT_EQ(totals->recoded, 1u);
  EXPECT_EQ(totals->stored_bytes_after, kChunkBytes);
  EXPECT_EQ(Decompress(Keys(0, 1))->already_in_form, 1u);
  absl::StatusOr<std::optional<ChunkLease>> lease = store_->host().Acquire(Key(0));
  ASSERT_TRUE(lease.ok() && lease->has_value());
  EXPECT_EQ((*lease)->checksum(), form.decoded_checksum);
  EXPECT_LT(ErrorOf(0, Bytes((*lease)->payload())), 0.01);
}

TEST_F(HostFormsTest, AChunkAnEngineReadsThroughoutIsBusyAndLeftAsItIs) {
  Open(/*with_disk=*/false);
  ASSERT_TRUE(store_->NoteLayout(layout_).ok());
  StoreKv(0);
  absl::StatusOr<std::optional<ChunkLease>> reader = store_->host().Acquire(Key(0));
  ASSERT_TRUE(reader.ok() && reader->has_value());
  absl::StatusOr<RecodeTotals> totals = Compress(Keys(0, 1));
  ASSERT_TRUE(totals.ok()) << totals.status();
  EXPECT_EQ(totals->busy, 1u);
  EXPECT_EQ(totals->recoded, 0u);
  EXPECT_EQ(Bytes((*reader)->payload()), Kv(0));
  reader->reset();
  EXPECT_EQ(Compress(Keys(0, 1))->recoded, 1u);

  // An engine that decodes the frame itself reads it throughout: Decompress leaves it too.
  bool deferred = true;
  LoadLeases frame = Load(Keys(0, 1), deferred, Decodes(CodecId::kInt8));
  ASSERT_EQ(frame.leases.size(), 1u);
  ASSERT_TRUE(frame.leases[0].encoding().encoded());
  totals = Decompress(Keys(0, 1));
  ASSERT_TRUE(totals.ok()) << totals.status();
  EXPECT_EQ(totals->busy, 1u);
  EXPECT_TRUE(store_->host().HoldsEncoded(Key(0)));
  frame.leases.clear();
  EXPECT_EQ(Decompress(Keys(0, 1))->recoded, 1u);
}

TEST_F(HostFormsTest, AFrameThatDoesNotDecodeFailsItsLoadAndGoes) {
  Open(/*with_disk=*/false);
  ASSERT_TRUE(store_->NoteLayout(layout_).ok());
  StoreKv(0);
  StoreKv(1);
  ASSERT_EQ(Compress(Keys(0, 2))->recoded, 2u);
  {
    absl::StatusOr<std::optional<ChunkLease>> lease =
        store_->host().AcquireForCopy(Key(1), std::nullopt, Forms::kAny);
    ASSERT_TRUE(lease.ok() && lease->has_value());
    const ArenaRange& range = (*lease)->ranges().front();
    store_->host().arena_base()[range.offset + range.size_bytes / 2] ^= std::byte{0x5A};
  }
  bool deferred = false;
  LoadLeases leased = Load(Keys(0, 2), deferred);
  EXPECT_EQ(leased.failure.code(), absl::StatusCode::kDataLoss) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 1u);  // the chunk before it still loads
  EXPECT_LT(ErrorOf(0, Bytes(leased.leases[0].payload())), 0.01);
  EXPECT_FALSE(store_->host().Contains(Key(1)));
}

// A chunk thinned for the device pool (a token-dropping codec: only its kept blocks) is whole
// nowhere: a load stops at it (FAILED_PRECONDITION) and it stays, never taken for a corrupt frame.
TEST_F(HostFormsTest, ALoadStopsAtAThinnedChunkWhichStays) {
  KvLayout nope = layout_;
  nope.positional = PositionalFormat::kNope;
  Open(/*with_disk=*/false);
  ASSERT_TRUE(store_->NoteLayout(nope).ok());
  const std::vector<ChunkKey> keys = {testing::SyntheticKey(nope, 0),
                                      testing::SyntheticKey(nope, 1)};
  for (uint64_t id = 0; id < 2; ++id) {
    absl::StatusOr<ReserveResult> reserved =
        store_->host().Reserve(nope, keys[id], {.num_tokens = 16});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    reserved->reservation.payload().CopyFrom(
        testing::MakeKv(nope, 16, testing::KvShape::kShaped, id));
    ASSERT_TRUE(store_->host().Commit(std::move(reserved->reservation)).ok());
  }
  absl::StatusOr<RecodeTotals> thinned =
      store_->Recode(std::span(keys).subspan(1), Tier::kHost,
                     {.codec = *CodecRegistry::Find("drop_sink_recent"),
                      .params = {.group_size = 4, .sink_tokens = 4, .recent_tokens = 4}});
  ASSERT_TRUE(thinned.ok()) << thinned.status();
  ASSERT_EQ(thinned->recoded, 1u);
  bool deferred = false;
  LoadLeases leased = Load(keys, deferred, {}, &nope);
  EXPECT_EQ(leased.failure.code(), absl::StatusCode::kFailedPrecondition) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 1u);  // the chunk before it still loads
  leased.leases.clear();
  EXPECT_TRUE(store_->host().HoldsEncoded(keys[1])) << "kept for the device pool";
  EXPECT_EQ(FormOf(keys[1]).codec, static_cast<uint16_t>(CodecId::kDropSinkRecent));
}

TEST_F(HostFormsTest, TiersBelowAreGivenTheDecodedChunkNeverTheFrame) {
  Open(/*with_disk=*/true);
  ASSERT_TRUE(store_->NoteLayout(layout_).ok());
  StoreKv(0);
  StoreKv(1);
  ASSERT_EQ(Compress(Keys(0, 2))->recoded, 2u);
  const StoredEncoding form0 = FormOf(Key(0));
  const StoredEncoding form1 = FormOf(Key(1));
  // A flush (Drain) copies chunk 1 down as it decodes.
  absl::StatusOr<uint64_t> flushed = store_->FlushToLowerTiers();
  ASSERT_TRUE(flushed.ok()) << flushed.status();
  std::optional<LowerTier::ChunkInfo> below = store_->DescribeBelowHost(Key(1));
  ASSERT_TRUE(below.has_value());
  EXPECT_EQ(below->payload_bytes, kChunkBytes);
  EXPECT_EQ(below->payload_checksum, form1.decoded_checksum);
  ASSERT_TRUE(store_->Clear({.keys = absl::flat_hash_set<ChunkKey>{Key(1)}}, Tier::kDisk).ok());
  // Evictions (four more chunks in a four-chunk tier) demote chunks 0 and 1 decoded.
  for (uint64_t id = 2; id < 6; ++id) StoreKv(id);
  store_->Flush();
  EXPECT_FALSE(store_->host().Contains(Key(0)));
  bool deferred = false;
  LoadLeases leased = Load(Keys(0, 2), deferred);
  ASSERT_TRUE(leased.failure.ok()) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 2u);
  EXPECT_EQ(leased.promoted_chunks, 2u);
  EXPECT_EQ(ChecksumBytes(Bytes(leased.leases[0].payload())), form0.decoded_checksum);
  EXPECT_EQ(ChecksumBytes(Bytes(leased.leases[1].payload())), form1.decoded_checksum);
  EXPECT_EQ(store_->Stats().movement.demotion_failures, 0u);
}

TEST_F(HostFormsTest, LoadsThroughCompressAndDecompressGetWholeChunks) {
  host_chunks_ = 8;  // room to decode every chunk into fresh pages while the loaders lease them
  Open(/*with_disk=*/false);
  ASSERT_TRUE(store_->NoteLayout(layout_).ok());
  for (uint64_t id = 0; id < 4; ++id) StoreKv(id);
  std::atomic<bool> stop{false};
  std::atomic<int> loads{0};
  std::atomic<int> frames{0};
  std::atomic<int> busy_loads{0};
  // One loader has the daemon decode compressed chunks in place; the other decodes the frames it
  // is given itself, as a connector that decodes on its device does.
  const auto load = [&](CodecSet reader_decodes) {
    const Codec& int8 = **CodecRegistry::Find("int8");
    // Bounded: 20 to 2,000 loads, until the recodes are done.
    for (int i = 0; i < 2000 && (i < 20 || !stop.load()); ++i) {
      bool deferred = false;
      LoadLeases leased = Load(Keys(0, 4), deferred, reader_decodes);
      if (reader_decodes.empty() && leased.failure.code() == absl::StatusCode::kUnavailable) {
        // The decoding loader held a frame through every try to decode it in place: the engine
        // recomputes (never a wrong chunk).
        busy_loads.fetch_add(1);
        continue;
      }
      ASSERT_TRUE(leased.failure.ok()) << leased.failure;
      ASSERT_EQ(leased.leases.size(), 4u);
      for (uint64_t id = 0; id < 4; ++id) {
        const ChunkLease& lease = leased.leases[id];
        std::vector<std::byte> bytes = Bytes(lease.payload());
        // Whole: its own checksum. A frame decodes to what was encoded.
        ASSERT_EQ(ChecksumBytes(bytes), lease.checksum());
        if (lease.encoding().encoded()) {
          ASSERT_FALSE(reader_decodes.empty());
          std::vector<std::byte> decoded(lease.encoding().decoded_bytes);
          ASSERT_TRUE(int8.Decode(layout_, bytes, decoded).ok());
          ASSERT_EQ(ChecksumBytes(decoded), lease.encoding().decoded_checksum);
          bytes = std::move(decoded);
          frames.fetch_add(1);
        }
        // The chunk or its decode, within the codec's error.
        ASSERT_LT(ErrorOf(id, bytes), 0.02);
      }
      loads.fetch_add(1);
    }
  };
  std::thread loader([&] { load({}); });
  std::thread decoding_loader([&] { load(Decodes(CodecId::kInt8)); });
  for (int round = 0; round < 20; ++round) {
    absl::StatusOr<RecodeTotals> compressed = Compress(Keys(0, 4));
    ASSERT_TRUE(compressed.ok()) << compressed.status();
    absl::StatusOr<RecodeTotals> decompressed = Decompress(Keys(0, 4));
    ASSERT_TRUE(decompressed.ok()) << decompressed.status();
  }
  stop = true;
  loader.join();
  decoding_loader.join();
  EXPECT_GT(loads.load(), 0);
  EXPECT_EQ(store_->Stats().movement.load_encoded, static_cast<uint64_t>(frames.load()));
  RecordProperty("busy_loads", busy_loads.load());
  const absl::Status consistent = store_->host().CheckConsistency();
  EXPECT_TRUE(consistent.ok()) << consistent;
}

TEST_F(HostFormsTest, AHostCodecCompressesCommitsInTheBackgroundAndLoadsDecodeThem) {
  host_codec_ = {.codec = "int8", .tenant_codecs = {{"exact", {.codec = ""}}}};
  host_chunks_ = 8;
  Open(/*with_disk=*/false);
  ASSERT_TRUE(store_->NoteLayout(layout_).ok());
  StoreKv(0);
  StoreKv(1);
  StoreKv(2, "exact");  // this tenant's chunks are kept as they are
  store_->Flush();
  MovementStats movement = store_->Stats().movement;
  EXPECT_EQ(movement.host_compressed, 2u);
  EXPECT_EQ(movement.host_compress_skipped, 1u);
  EXPECT_EQ(movement.host_compress_failed, 0u);
  EXPECT_EQ(store_->host().Stats().encoded_chunks, 2u);
  EXPECT_TRUE(FormOf(Key(1)).encoded());
  EXPECT_FALSE(FormOf(Key(2)).encoded());
  bool deferred = false;
  LoadLeases leased = Load(Keys(0, 3), deferred);
  EXPECT_TRUE(deferred);
  ASSERT_TRUE(leased.failure.ok()) << leased.failure;
  ASSERT_EQ(leased.leases.size(), 3u);
  EXPECT_LT(ErrorOf(0, Bytes(leased.leases[0].payload())), 0.01);
  EXPECT_EQ(Bytes(leased.leases[2].payload()), Kv(2));
  EXPECT_EQ(store_->Stats().movement.load_decoded, 2u);
}

TEST(KnownLayoutsTest, TakesNewLayoutsUpToItsMostAndKnownOnesAlways) {
  KnownLayouts layouts;
  auto layout = [](size_t i) { return testing::SmallLayout("model-" + std::to_string(i)); };
  for (size_t i = 0; i < kMaxKnownLayouts; ++i) ASSERT_TRUE(layouts.Note(layout(i)).ok()) << i;
  const absl::Status full = layouts.Note(layout(kMaxKnownLayouts));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_EQ(layouts.Find(layout(kMaxKnownLayouts).Fingerprint()), nullptr);
  EXPECT_TRUE(layouts.Note(layout(7)).ok()) << "a known layout is noted again";
  EXPECT_NE(layouts.Find(layout(7).Fingerprint()), nullptr);
}

TEST_F(HostFormsTest, AnUnknownHostCodecIsRefusedAtCreate) {
  TieredStoreOptions options;
  options.host = {.capacity_bytes = 4 * kChunkBytes, .page_bytes = 4096};
  options.host_codec = {.codec = "zip"};
  EXPECT_EQ(TieredStore::Create(std::move(options)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(HostFormsTest, WriteThroughOfAChunkCompressedFirstWritesItDecoded) {
  host_codec_ = {.codec = "int8"};
  write_through_ = true;
  Open(/*with_disk=*/true);
  ASSERT_TRUE(store_->NoteLayout(layout_).ok());
  StoreKv(0);
  store_->Flush();
  // Written through before or after its compression: the disk holds the chunk or its decode.
  std::optional<LowerTier::ChunkInfo> below = store_->DescribeBelowHost(Key(0));
  ASSERT_TRUE(below.has_value());
  EXPECT_EQ(below->payload_bytes, kChunkBytes);
  const StoredEncoding form = FormOf(Key(0));
  ASSERT_TRUE(form.encoded());
  EXPECT_TRUE(below->payload_checksum == ChecksumBytes(Kv(0)) ||
              below->payload_checksum == form.decoded_checksum);
  EXPECT_EQ(store_->Stats().movement.write_through_written, 1u);
}

}  // namespace
}  // namespace strata::storage
