// DevicePoolTiering over a real host tier and a HostRuntime device pool: a chunk evicted from T0
// lands in the host tier in its layout's chunk format, and comes back into the pool byte for byte;
// what cannot come back (absent, not whole pages, rotted bytes, no room) is refused. Each test runs
// with a runtime that digests its copies (the check fused into the promotion's copy) and with one
// that does not (a checksum pass of its own first), as CUDA's.
#include "storage/tiered/device_pool_tiering.h"

#include <cstring>
#include <thread>

#include "core/key_hasher.h"
#include "gtest/gtest.h"
#include "storage/codec/codec_registry.h"
#include "storage/device/device_pools.h"
#include "storage/device/host_runtime.h"
#include "storage/tiered/chunk_codec.h"
#include "tests/support/test_layout.h"

namespace strata::storage {
namespace {

// 2 layers x 2 planes x 16 tokens x 64 bytes: 2 KiB per layer of a page, 4 KiB per page.
KvLayout Layout() { return test_support::SmallLayout({.model_id = "tiering-test"}); }
constexpr uint32_t kBlock = 16;

ChunkKey Key(uint32_t id) {
  const std::vector<uint32_t> tokens(16, id);
  return KeyHasher::Create(Layout(), {})->PicKey(tokens, 0);
}

// The layout with its keys before RoPE (position-free), whose tokens may be dropped.
KvLayout NopeLayout() {
  KvLayout layout = Layout();
  layout.positional = PositionalFormat::kNope;
  return layout;
}

ChunkKey NopeKey(uint32_t id) {
  const std::vector<uint32_t> tokens(64, id);
  return KeyHasher::Create(NopeLayout(), {})->PicKey(tokens, 0);
}

// The byte every (layer, plane, block i of the chunk) run holds.
uint8_t Fill(uint32_t layer, uint32_t plane, size_t block) {
  return static_cast<uint8_t>(1 + layer * 16 + plane * 8 + block);
}

void FillChunk(const DevicePool& pool, std::span<const uint32_t> pages) {
  const uint64_t plane_bytes = Layout().plane_token_bytes() * kBlock;
  for (uint32_t layer = 0; layer < 2; ++layer) {
    for (uint32_t plane = 0; plane < 2; ++plane) {
      for (size_t i = 0; i < pages.size(); ++i) {
        std::memset(pool.PageData(layer, pages[i]) + plane * plane_bytes, Fill(layer, plane, i),
                    plane_bytes);
      }
    }
  }
}

bool ChunkHolds(const DevicePool& pool, std::span<const uint32_t> pages) {
  const uint64_t plane_bytes = Layout().plane_token_bytes() * kBlock;
  for (uint32_t layer = 0; layer < 2; ++layer) {
    for (uint32_t plane = 0; plane < 2; ++plane) {
      for (size_t i = 0; i < pages.size(); ++i) {
        const std::byte* at = pool.PageData(layer, pages[i]) + plane * plane_bytes;
        for (uint64_t b = 0; b < plane_bytes; ++b) {
          if (at[b] != std::byte{Fill(layer, plane, i)}) return false;
        }
      }
    }
  }
  return true;
}

// The chunk of `blocks` blocks in chunk format ([layer][plane][token]...), as FillChunk wrote it.
std::vector<std::byte> ExpectedChunk(size_t blocks) {
  const KvLayout layout = Layout();
  const auto tokens = static_cast<uint32_t>(blocks * kBlock);
  std::vector<std::byte> chunk(layout.chunk_bytes(tokens));
  const uint64_t plane_bytes = layout.plane_token_bytes() * kBlock;
  for (uint32_t layer = 0; layer < 2; ++layer) {
    for (uint32_t plane = 0; plane < 2; ++plane) {
      for (size_t i = 0; i < blocks; ++i) {
        std::memset(chunk.data() + layout.plane_offset(layer, plane, tokens) + i * plane_bytes,
                    Fill(layer, plane, i), plane_bytes);
      }
    }
  }
  return chunk;
}

// A HostRuntime that says it cannot digest copies.
class UndigestedRuntime final : public DeviceRuntime {
 public:
  UndigestedRuntime() : capabilities_(host_.Capabilities()) {
    capabilities_.digested_copies = false;
  }
  const DeviceCapabilities& Capabilities() const override { return capabilities_; }
  absl::StatusOr<std::unique_ptr<DeviceStream>> CreateStream(std::string_view name) override {
    return host_.CreateStream(name);
  }
  absl::StatusOr<std::unique_ptr<DeviceEvent>> CreateEvent() override {
    return host_.CreateEvent();
  }
  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(uint64_t size_bytes,
                                                             MemoryKind kind) override {
    return host_.Allocate(size_bytes, kind);
  }
  absl::StatusOr<std::unique_ptr<ShareableAllocation>> AllocateShareable(
      uint64_t size_bytes, std::string_view name) override {
    return host_.AllocateShareable(size_bytes, name);
  }
  absl::StatusOr<std::unique_ptr<DeviceAllocation>> OpenShared(
      const SharedMemoryHandle& handle) override {
    return host_.OpenShared(handle);
  }
  absl::Status RegisterHostMemory(void* base, uint64_t size_bytes) override {
    return host_.RegisterHostMemory(base, size_bytes);
  }
  absl::Status UnregisterHostMemory(void* base) override {
    return host_.UnregisterHostMemory(base);
  }

 private:
  HostRuntime host_;
  DeviceCapabilities capabilities_;
};

// The parameter: whether the runtime digests its copies.
class DevicePoolTieringTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (GetParam()) {
      runtime_ = std::make_unique<HostRuntime>();
    } else {
      runtime_ = std::make_unique<UndigestedRuntime>();
    }
    ASSERT_EQ(runtime_->Capabilities().digested_copies, GetParam());
    host_ = *HostTier::Create({.capacity_bytes = 1 << 20, .page_bytes = 4096});
    Build(/*demote_ahead=*/false);
  }

  // The tiering and a pool of 4 pages of 4 KiB demoting through it.
  void Build(bool demote_ahead) {
    if (tiering_) tiering_->Stop();
    pools_.reset();
    tiering_.emplace(
        *host_, *runtime_,
        DevicePoolTieringOptions{.block_tokens = kBlock, .demote_ahead = demote_ahead});
    pools_.emplace(*runtime_,
                   DevicePoolsOptions{.bytes_per_layout = 4 * 4096,
                                      .block_tokens = kBlock,
                                      .on_evict = tiering_->DemoteOnEvict(),
                                      .on_evictable = tiering_->DemoteAheadOnEvictable()});
    pool_ = *pools_->ForLayout(Layout());
  }

  void TearDown() override {
    if (tiering_) tiering_->Stop();
  }

  // Stores chunk `key` of `pages` pages in the pool, filled.
  void Store(const ChunkKey& key, uint32_t pages) {
    absl::StatusOr<PoolReservation> reserved = pool_->Reserve(key, pages, 1);
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    FillChunk(*pool_, reserved->pages);
    ASSERT_TRUE(pool_->Commit(reserved->id).ok());
  }

  std::unique_ptr<DeviceRuntime> runtime_;
  std::unique_ptr<HostTier> host_;
  std::optional<DevicePoolTiering> tiering_;
  std::optional<DevicePools> pools_;
  DevicePool* pool_ = nullptr;
};

TEST_P(DevicePoolTieringTest, AnEvictedChunkIsDemotedAndComesBackByteForByte) {
  Store(Key(1), 3);
  Store(Key(2), 3);  // evicts chunk 1: demoted
  EXPECT_FALSE(pool_->Acquire(Key(1), 9).has_value());
  EXPECT_EQ(tiering_->stats().demoted, 1u);
  EXPECT_EQ(tiering_->stats().demoted_bytes, Layout().chunk_bytes(48));

  // In the host tier, in chunk format.
  absl::StatusOr<std::optional<ChunkLease>> lease = host_->AcquireForCopy(Key(1));
  ASSERT_TRUE(lease.ok() && lease->has_value());
  EXPECT_EQ((*lease)->num_tokens(), 48u);
  std::vector<std::byte> payload((*lease)->size_bytes());
  (*lease)->payload().CopyTo(payload);
  EXPECT_EQ(payload, ExpectedChunk(3));
  lease->reset();

  // Back into the pool (evicting chunk 2, which is demoted in turn), byte for byte.
  absl::StatusOr<bool> promoted = tiering_->Promote(Layout(), *pool_, Key(1));
  ASSERT_TRUE(promoted.ok()) << promoted.status();
  EXPECT_TRUE(*promoted);
  std::optional<PoolChunkRef> back = pool_->Acquire(Key(1), 9);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->pages.size(), 3u);
  EXPECT_TRUE(ChunkHolds(*pool_, back->pages));
  EXPECT_EQ(tiering_->stats().promoted, 1u);
  EXPECT_EQ(tiering_->stats().demoted, 2u) << "chunk 2 made room";
  EXPECT_TRUE(pool_->CheckConsistency().ok());

  // Evicted again, the host tier holds it already: nothing is copied.
  ASSERT_TRUE(pool_->Release(back->ref_id).ok());
  Store(Key(3), 4);
  EXPECT_EQ(tiering_->stats().demote_skipped, 1u);
  EXPECT_EQ(tiering_->stats().demoted, 2u);
}

TEST_P(DevicePoolTieringTest, WhatCannotComeBackIsRefused) {
  // Absent from the host tier.
  EXPECT_FALSE(*tiering_->Promote(Layout(), *pool_, Key(7)));
  // Not a whole number of pages (a prefix chunk's partial size).
  {
    absl::StatusOr<ReserveResult> odd = host_->ReserveSized(Key(8), 1000, {.num_tokens = 1});
    ASSERT_TRUE(odd.ok());
    odd->reservation.payload().CopyFrom(std::vector<std::byte>(1000));
    ASSERT_TRUE(host_->Commit(std::move(odd->reservation)).ok());
  }
  EXPECT_FALSE(*tiering_->Promote(Layout(), *pool_, Key(8)));

  // Rotted in the arena since its commit: refused, counted.
  Store(Key(1), 2);
  Store(Key(2), 2);
  Store(Key(3), 2);  // evicts chunk 1
  {
    absl::StatusOr<std::optional<ChunkLease>> lease = host_->AcquireForCopy(Key(1));
    ASSERT_TRUE(lease.ok() && lease->has_value());
    host_->arena_base()[(*lease)->ranges()[0].offset + 5] ^= std::byte{0x40};
  }
  EXPECT_FALSE(*tiering_->Promote(Layout(), *pool_, Key(1)));
  EXPECT_EQ(tiering_->stats().promote_failures, 1u);
  EXPECT_FALSE(pool_->Acquire(Key(1), 5).has_value()) << "nothing rotted is served";
  EXPECT_TRUE(pool_->CheckConsistency().ok()) << "the reservation, if any, was aborted";
  // A digesting runtime finds the rot in the copy, after the reservation evicted chunk 2; a
  // checksum pass finds it before.
  const ChunkKey two[] = {Key(2)};
  EXPECT_EQ(pool_->Lookup(two), GetParam() ? 0u : 1u);
  if (GetParam()) Store(Key(2), 2);

  // No room: every page referenced. Admission refuses the promotion and evicts nothing.
  {
    const std::vector<std::byte> chunk = ExpectedChunk(2);
    absl::StatusOr<ReserveResult> whole =
        host_->ReserveSized(Key(9), chunk.size(), {.num_tokens = 32});
    ASSERT_TRUE(whole.ok());
    whole->reservation.payload().CopyFrom(chunk);
    ASSERT_TRUE(host_->Commit(std::move(whole->reservation)).ok());
  }
  std::optional<PoolChunkRef> a = pool_->Acquire(Key(2), 5);
  std::optional<PoolChunkRef> b = pool_->Acquire(Key(3), 5);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(tiering_->Promote(Layout(), *pool_, Key(9)).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(pool_->Release(a->ref_id).ok());
  absl::StatusOr<bool> promoted = tiering_->Promote(Layout(), *pool_, Key(9));
  ASSERT_TRUE(promoted.ok() && *promoted);
  std::optional<PoolChunkRef> nine = pool_->Acquire(Key(9), 5);
  ASSERT_TRUE(nine.has_value());
  EXPECT_TRUE(ChunkHolds(*pool_, nine->pages)) << "a host chunk in chunk format, paged";
  EXPECT_TRUE(pool_->CheckConsistency().ok());
}

// A host chunk Compress thinned (drop_sink_recent) comes into the pool as its kept blocks, each
// page with its position in the chunk; evicted, it is not demoted (the host tier keeps its frame,
// and promotes it again). A frame that rotted is refused and counted; another codec's form is
// not promoted (loads decode it in place first).
TEST_P(DevicePoolTieringTest, AThinnedHostChunkComesBackAsItsKeptBlocksAtTheirPositions) {
  const KvLayout layout = NopeLayout();
  DevicePool* pool = *pools_->ForLayout(layout);
  const std::vector<std::byte> chunk = ExpectedChunk(4);  // blocks 0..3, each its own bytes
  auto put = [&](const ChunkKey& key, std::string_view codec_name, const CodecParams& params) {
    absl::StatusOr<ReserveResult> reserved =
        host_->ReserveSized(key, chunk.size(), {.num_tokens = 64});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    reserved->reservation.payload().CopyFrom(chunk);
    ASSERT_TRUE(host_->Commit(std::move(reserved->reservation)).ok());
    const Codec* codec = *CodecRegistry::Find(codec_name);
    std::vector<std::byte> decoded(chunk.size());
    absl::StatusOr<std::optional<EncodedForm>> form =
        EncodeChunk(*codec, params, layout, 64, chunk, decoded);
    ASSERT_TRUE(form.ok() && form->has_value()) << form.status();
    absl::StatusOr<std::optional<ChunkLease>> lease =
        host_->AcquireForCopy(key, std::nullopt, Forms::kAny);
    ASSERT_TRUE(lease.ok() && lease->has_value());
    ASSERT_TRUE(host_->ReplaceForm(**lease, (*form)->frame, (*form)->encoding).ok());
  };
  put(NopeKey(1), "drop_sink_recent", {.sink_tokens = 16, .recent_tokens = 16});

  absl::StatusOr<bool> promoted = tiering_->Promote(layout, *pool, NopeKey(1));
  ASSERT_TRUE(promoted.ok() && *promoted) << promoted.status();
  std::optional<PoolChunkRef> ref = pool->Acquire(NopeKey(1), 9);
  ASSERT_TRUE(ref.has_value());
  ASSERT_EQ(ref->pages.size(), 2u) << "blocks 0 and 3 kept";
  EXPECT_EQ(ref->positions, (std::vector<uint32_t>{0, 48}));
  const uint64_t plane_bytes = layout.plane_token_bytes() * kBlock;
  const size_t kept_blocks[] = {0, 3};
  for (uint32_t layer = 0; layer < 2; ++layer) {
    for (uint32_t plane = 0; plane < 2; ++plane) {
      for (size_t k = 0; k < 2; ++k) {
        const std::byte* at = pool->PageData(layer, ref->pages[k]) + plane * plane_bytes;
        const std::vector<std::byte> expected(plane_bytes,
                                              std::byte{Fill(layer, plane, kept_blocks[k])});
        EXPECT_EQ(std::vector<std::byte>(at, at + plane_bytes), expected)
            << "layer " << layer << " plane " << plane << " page " << k;
      }
    }
  }
  EXPECT_EQ(tiering_->stats().promoted, 1u);
  EXPECT_EQ(tiering_->stats().promoted_kept, 1u);
  EXPECT_EQ(tiering_->stats().promoted_bytes, layout.chunk_bytes(32));

  // Evicted for a whole chunk: dropped from the pool, not demoted; the frame stays up there.
  ASSERT_TRUE(pool->Release(ref->ref_id).ok());
  absl::StatusOr<PoolReservation> whole = pool->Reserve(NopeKey(2), 4, 1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  pool->Abort(whole->id);
  EXPECT_EQ(pool->Stats().evictions, 1u);
  EXPECT_EQ(tiering_->stats().demoted + tiering_->stats().demote_skipped +
                tiering_->stats().demote_failures,
            0u);
  EXPECT_TRUE(host_->HoldsEncoded(NopeKey(1)));
  promoted = tiering_->Promote(layout, *pool, NopeKey(1));
  ASSERT_TRUE(promoted.ok() && *promoted) << "promoted again from its frame";

  // Another codec's form is not promoted (and not a failure).
  put(NopeKey(3), "int8", {});
  promoted = tiering_->Promote(layout, *pool, NopeKey(3));
  ASSERT_TRUE(promoted.ok());
  EXPECT_FALSE(*promoted);
  EXPECT_EQ(tiering_->stats().promote_failures, 0u);

  // A frame that rotted in the arena: refused, counted, nothing served.
  put(NopeKey(4), "drop_sink_recent", {});
  {
    absl::StatusOr<std::optional<ChunkLease>> lease =
        host_->AcquireForCopy(NopeKey(4), std::nullopt, Forms::kAny);
    ASSERT_TRUE(lease.ok() && lease->has_value());
    host_->arena_base()[(*lease)->ranges()[0].offset + 100] ^= std::byte{0x10};
  }
  promoted = tiering_->Promote(layout, *pool, NopeKey(4));
  ASSERT_TRUE(promoted.ok());
  EXPECT_FALSE(*promoted);
  EXPECT_EQ(tiering_->stats().promote_failures, 1u);
  EXPECT_FALSE(pool->Acquire(NopeKey(4), 9).has_value());
  EXPECT_TRUE(pool->CheckConsistency().ok()) << pool->CheckConsistency();
}

// Demotion ahead: a chunk is copied down by the tiering's thread once it becomes evictable, so
// its eviction copies nothing under the pool's lock; the thread's own references count no hit and
// queue nothing again; once stopped, nothing is queued and eviction demotes as before.
TEST_P(DevicePoolTieringTest, ChunksAreDemotedAheadOfTheirEviction) {
  Build(/*demote_ahead=*/true);
  Store(Key(1), 2);
  tiering_->FlushDemotionsAhead();
  EXPECT_EQ(tiering_->stats().demoted_ahead, 1u);
  EXPECT_EQ(tiering_->stats().demoted, 1u);
  {
    absl::StatusOr<std::optional<ChunkLease>> lease = host_->AcquireForCopy(Key(1));
    ASSERT_TRUE(lease.ok() && lease->has_value());
    std::vector<std::byte> payload((*lease)->size_bytes());
    (*lease)->payload().CopyTo(payload);
    EXPECT_EQ(payload, ExpectedChunk(2)) << "in chunk format, as a demotion at eviction writes it";
  }
  EXPECT_EQ(pool_->Stats().hits, 0u) << "the thread's reference is upkeep, not a hit";

  // A reader's release queues nothing: the host tier holds the chunk already.
  std::optional<PoolChunkRef> read = pool_->Acquire(Key(1), 7);
  ASSERT_TRUE(read.has_value());
  ASSERT_TRUE(pool_->Release(read->ref_id).ok());
  Store(Key(2), 2);
  tiering_->FlushDemotionsAhead();
  EXPECT_EQ(tiering_->stats().demoted_ahead, 2u);

  // Chunk 1's eviction finds it in the host tier: nothing copied under the lock.
  Store(Key(3), 2);
  EXPECT_EQ(tiering_->stats().demote_skipped, 1u);
  tiering_->FlushDemotionsAhead();
  EXPECT_EQ(tiering_->stats().demoted_ahead, 3u);
  EXPECT_EQ(tiering_->stats().demoted, 3u);
  EXPECT_EQ(tiering_->stats().demote_failures, 0u);

  // And it comes back byte for byte.
  absl::StatusOr<bool> promoted = tiering_->Promote(Layout(), *pool_, Key(1));
  ASSERT_TRUE(promoted.ok() && *promoted) << promoted.status();
  std::optional<PoolChunkRef> back = pool_->Acquire(Key(1), 9);
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(ChunkHolds(*pool_, back->pages));
  ASSERT_TRUE(pool_->Release(back->ref_id).ok());

  // Stopped: a new chunk is not queued (counted) and its eviction demotes it.
  tiering_->Stop();
  Store(Key(4), 2);
  EXPECT_EQ(tiering_->stats().demote_ahead_dropped, 1u);
  Store(Key(5), 4);  // evicts everything
  EXPECT_TRUE(host_->Contains(Key(4)));
  EXPECT_EQ(pool_->Stats().references, 0u);
  EXPECT_TRUE(pool_->CheckConsistency().ok());
}

// Requests acquiring, releasing and storing chunks while the thread copies them down: every
// chunk the host tier ends up holding is the chunk byte for byte, and the pool stays consistent.
TEST_P(DevicePoolTieringTest, DemotionAheadRacesRequestsSafely) {
  Build(/*demote_ahead=*/true);
  std::vector<std::thread> requests;
  for (uint32_t t = 0; t < 2; ++t) {
    requests.emplace_back([&, t] {
      for (uint32_t i = 0; i < 200; ++i) {
        const ChunkKey key = Key(100 + (i * 2 + t) % 12);
        absl::StatusOr<PoolReservation> reserved = pool_->Reserve(key, 1 + i % 2, 10 + t);
        if (reserved.ok() && reserved->outcome == PoolReserveOutcome::kReserved) {
          FillChunk(*pool_, reserved->pages);
          ASSERT_TRUE(pool_->Commit(reserved->id).ok());
        }
        if (std::optional<PoolChunkRef> ref = pool_->Acquire(key, 10 + t)) {
          EXPECT_TRUE(ChunkHolds(*pool_, ref->pages));
          ASSERT_TRUE(pool_->Release(ref->ref_id).ok());
        }
      }
    });
  }
  for (std::thread& thread : requests) thread.join();
  tiering_->FlushDemotionsAhead();
  EXPECT_EQ(tiering_->stats().demote_failures, 0u);
  for (uint32_t k = 100; k < 112; ++k) {
    absl::StatusOr<std::optional<ChunkLease>> lease = host_->AcquireForCopy(Key(k));
    ASSERT_TRUE(lease.ok());
    if (!lease->has_value()) continue;
    std::vector<std::byte> payload((*lease)->size_bytes());
    (*lease)->payload().CopyTo(payload);
    EXPECT_EQ(payload, ExpectedChunk(payload.size() / ExpectedChunk(1).size())) << k;
  }
  EXPECT_EQ(pool_->Stats().references, 0u);
  EXPECT_TRUE(pool_->CheckConsistency().ok());
}

INSTANTIATE_TEST_SUITE_P(Runtimes, DevicePoolTieringTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "DigestedCopies" : "ChecksumPass";
                         });

}  // namespace
}  // namespace strata::storage
