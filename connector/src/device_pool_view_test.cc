// The device pool (T0) mapped in an engine, through the connector's copy plans: a T1 chunk into
// T0 pages (promotion) and back (demotion), row by row where the geometry says.
#include "connector/src/device_pool_view.h"

#include <cstring>
#include <random>
#include <vector>

#include "connector/src/copy_plan.h"
#include "gtest/gtest.h"
#include "storage/device/host_runtime.h"
#include "tests/support/test_layout.h"

namespace strata::connector::internal {
namespace {

constexpr uint32_t kBlockTokens = 16;

KvLayout Layout() {
  return test_support::SmallLayout(
      {.model_id = "pool-view-test", .num_layers = 3, .head_dim = 32, .chunk_tokens = 64});
}

class DevicePoolViewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto geometry = storage::DevicePoolGeometryFor(layout_, kBlockTokens, 10);
    ASSERT_TRUE(geometry.ok()) << geometry.status();
    auto pool = storage::DevicePool::Create(runtime_, {.geometry = *geometry});
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
    // The engine's own mapping of the pool.
    auto mapped = runtime_.OpenShared(pool_->shared_handle());
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    mapped_ = *std::move(mapped);
  }

  // Copies every layer of `chunk` in `direction` on a stream of the runtime.
  void CopyChunk(const PagedKvCache& cache, std::vector<std::byte>& arena, const ChunkCopy& chunk,
                 CopyDirection direction) {
    ASSERT_TRUE(ValidateChunkCopy(layout_, cache, arena.size(), chunk).ok());
    auto stream = runtime_.CreateStream("pool-view");
    ASSERT_TRUE(stream.ok());
    for (uint32_t layer = 0; layer < layout_.num_layers; ++layer) {
      std::vector<storage::CopyRun> runs;
      AppendLayerRuns(layout_, cache, arena.data(), chunk, layer, direction, runs);
      ASSERT_TRUE((*stream)->Copy(runs).ok());
    }
    ASSERT_TRUE((*stream)->Synchronize().ok());
  }

  const KvLayout layout_ = Layout();
  storage::HostRuntime runtime_;
  std::unique_ptr<storage::DevicePool> pool_;
  std::unique_ptr<storage::DeviceAllocation> mapped_;
};

TEST_F(DevicePoolViewTest, AChunkCopiedIntoPoolPagesLandsRowByRowAndCopiesBackExactly) {
  const uint32_t tokens = layout_.chunk_tokens;
  std::vector<std::byte> arena(layout_.chunk_bytes(tokens));
  std::mt19937 random(7);
  for (std::byte& b : arena) b = static_cast<std::byte>(random());
  const std::vector<ArenaExtent> extents = {{.offset = 0, .length = arena.size()}};

  // The chunk takes 4 pages, not in order: a page's number is its block id.
  const std::vector<uint8_t> digest(DigestSizeBytes(HashAlgorithm::kXxh3_128), 3);
  auto reserved = pool_->Reserve(
      ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPositionIndependent,
                          layout_.Fingerprint(), digest),
      tokens / kBlockTokens, 1);
  ASSERT_TRUE(reserved.ok()) << reserved.status();
  std::vector<int32_t> block_ids(reserved->pages.rbegin(), reserved->pages.rend());

  auto cache = DevicePoolAsPagedKvCache(layout_, kBlockTokens, pool_->geometry(),
                                        static_cast<std::byte*>(mapped_->data()));
  ASSERT_TRUE(cache.ok()) << cache.status();
  const ChunkCopy chunk{.extents = extents,
                        .chunk_tokens = tokens,
                        .token_begin = 0,
                        .num_tokens = tokens,
                        .position_begin = 0,
                        .block_ids = block_ids};
  CopyChunk(*cache, arena, chunk, CopyDirection::kArenaToEngine);

  // Through the daemon's mapping: token t of plane p of layer l is row t % 16 of plane p in page
  // block_ids[t / 16].
  const uint64_t row = layout_.plane_token_bytes();
  for (uint32_t layer = 0; layer < layout_.num_layers; ++layer) {
    for (uint32_t plane = 0; plane < 2; ++plane) {
      for (uint32_t t = 0; t < tokens; ++t) {
        const std::byte* in_pool =
            pool_->PageData(layer, static_cast<uint32_t>(block_ids[t / kBlockTokens])) +
            plane * kBlockTokens * row + (t % kBlockTokens) * row;
        const std::byte* in_chunk =
            arena.data() + layout_.plane_offset(layer, plane, tokens) + uint64_t{t} * row;
        ASSERT_EQ(std::memcmp(in_pool, in_chunk, row), 0)
            << "layer " << layer << " plane " << plane << " token " << t;
      }
    }
  }

  // And back from the pages into a T1 chunk: byte for byte the chunk it came from.
  std::vector<std::byte> demoted(arena.size());
  CopyChunk(*cache, demoted, chunk, CopyDirection::kEngineToArena);
  EXPECT_EQ(demoted, arena);
}

TEST_F(DevicePoolViewTest, APoolOfAnotherModelOrBlockSizeIsRefused) {
  auto* base = static_cast<std::byte*>(mapped_->data());
  KvLayout other = layout_;
  other.num_kv_heads = 4;
  EXPECT_EQ(DevicePoolAsPagedKvCache(other, kBlockTokens, pool_->geometry(), base).status().code(),
            absl::StatusCode::kInvalidArgument);
  other = layout_;
  other.num_layers = 2;
  EXPECT_EQ(DevicePoolAsPagedKvCache(other, kBlockTokens, pool_->geometry(), base).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DevicePoolAsPagedKvCache(layout_, 32, pool_->geometry(), base).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DevicePoolAsPagedKvCache(layout_, 24, pool_->geometry(), base).status().code(),
            absl::StatusCode::kInvalidArgument);  // does not divide the chunk
  EXPECT_EQ(
      DevicePoolAsPagedKvCache(layout_, kBlockTokens, pool_->geometry(), nullptr).status().code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::connector::internal
