#include "connector/src/copy_plan.h"

#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::connector::internal {
namespace {

using ::testing::HasSubstr;

enum class EngineForm {
  kStackedNhd,         // vLLM FlashAttention [2, nb, bs, h, d], row-major
  kStackedHnd,         // same shape, physically [2, nb, h, bs, d]
  kStackedInterleave,  // same shape, physically [nb, 2, bs, h, d]
  kSeparate,           // K and V tensors [nb, bs, h, d]
  kSeparatePadded,     // K and V with padding after each slot row
  kMla,                // one plane [nb, bs, d]
};

std::string FormName(EngineForm form) {
  switch (form) {
    case EngineForm::kStackedNhd:
      return "StackedNhd";
    case EngineForm::kStackedHnd:
      return "StackedHnd";
    case EngineForm::kStackedInterleave:
      return "StackedInterleave";
    case EngineForm::kSeparate:
      return "Separate";
    case EngineForm::kSeparatePadded:
      return "SeparatePadded";
    case EngineForm::kMla:
      return "Mla";
  }
  return "?";
}

KvLayout MakeLayout(KvDtype dtype, EngineForm form, uint32_t layers, uint32_t heads, uint32_t dim,
                    uint32_t chunk_tokens) {
  KvLayout layout;
  layout.model_id = "test-model";
  layout.kind = form == EngineForm::kMla ? KvKind::kMlaLatent : KvKind::kMha;
  layout.num_layers = layers;
  layout.num_kv_heads = form == EngineForm::kMla ? 1 : heads;
  layout.head_dim = dim;
  layout.dtype = dtype;
  layout.chunk_tokens = chunk_tokens;
  return layout;
}

void FillRandom(std::vector<std::byte>& bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
}

int64_t ElemsSpanned(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t max = 0;
  for (size_t i = 0; i < shape.size(); ++i) max += (shape[i] - 1) * strides[i];
  return max + 1;
}

// The engine's paged KV in host memory, in one of the forms above.
struct EngineCache {
  std::vector<std::vector<std::byte>> buffers;
  std::vector<LayerKvCache> layers;

  EngineCache(const KvLayout& layout, EngineForm form, int64_t nb, int64_t bs, uint32_t seed) {
    const int64_t h = layout.num_kv_heads;
    const int64_t d = layout.head_dim;
    const int64_t elem = DtypeSizeBytes(layout.dtype);
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      LayerKvCache layer;
      auto tensor = [&](std::vector<int64_t> shape, std::vector<int64_t> strides) {
        buffers.emplace_back(ElemsSpanned(shape, strides) * elem);
        FillRandom(buffers.back(), seed + static_cast<uint32_t>(buffers.size()));
        return KvTensor{buffers.back().data(), std::move(shape), std::move(strides)};
      };
      switch (form) {
        case EngineForm::kStackedNhd:
          layer.kv = tensor({2, nb, bs, h, d}, {nb * bs * h * d, bs * h * d, h * d, d, 1});
          break;
        case EngineForm::kStackedHnd:
          layer.kv = tensor({2, nb, bs, h, d}, {nb * h * bs * d, h * bs * d, d, bs * d, 1});
          break;
        case EngineForm::kStackedInterleave:
          layer.kv = tensor({2, nb, bs, h, d}, {bs * h * d, 2 * bs * h * d, h * d, d, 1});
          break;
        case EngineForm::kSeparate:
          layer.kv = tensor({nb, bs, h, d}, {bs * h * d, h * d, d, 1});
          layer.v = tensor({nb, bs, h, d}, {bs * h * d, h * d, d, 1});
          break;
        case EngineForm::kSeparatePadded: {
          const int64_t row = h * d + 8;
          layer.kv = tensor({nb, bs, h, d}, {bs * row, row, d, 1});
          layer.v = tensor({nb, bs, h, d}, {bs * row, row, d, 1});
          break;
        }
        case EngineForm::kMla:
          layer.kv = tensor({nb, bs, d}, {bs * d, d, 1});
          break;
      }
      layers.push_back(std::move(layer));
    }
  }

  // Address of element [plane][block][slot][head][0] of layer `l`, straight from the tensors.
  std::byte* Element(const KvLayout& layout, uint32_t l, uint32_t plane, int64_t block,
                     int64_t slot, int64_t head) const {
    const int64_t elem = DtypeSizeBytes(layout.dtype);
    const LayerKvCache& layer = layers[l];
    const KvTensor& t = (layer.v.has_value() && plane == 1) ? *layer.v : layer.kv;
    auto* base = static_cast<std::byte*>(t.data);
    if (t.shape.size() == 5) {
      return base + (plane * t.strides[0] + block * t.strides[1] + slot * t.strides[2] +
                     head * t.strides[3]) *
                        elem;
    }
    if (t.shape.size() == 4) {
      return base + (block * t.strides[0] + slot * t.strides[1] + head * t.strides[2]) * elem;
    }
    return base + (block * t.strides[0] + slot * t.strides[1]) * elem;
  }
};

// The arena: a chunk's payload scattered over extents of irregular sizes, placed out of order.
struct Arena {
  std::vector<std::byte> bytes;
  std::vector<ArenaExtent> extents;

  // Splits `payload_bytes` into pieces of the given lengths (the last takes the rest), placing
  // them back to front with gaps.
  Arena(uint64_t payload_bytes, std::vector<uint64_t> piece_lengths, uint32_t seed) {
    std::vector<uint64_t> lengths;
    uint64_t left = payload_bytes;
    for (uint64_t len : piece_lengths) {
      if (left <= len) break;
      lengths.push_back(len);
      left -= len;
    }
    lengths.push_back(left);
    uint64_t offset = 64;
    std::vector<ArenaExtent> placed(lengths.size());
    for (size_t i = lengths.size(); i-- > 0;) {
      placed[i] = {offset, lengths[i]};
      offset += lengths[i] + 128;
    }
    extents = placed;
    bytes.resize(offset + 64);
    FillRandom(bytes, seed);
  }

  // Address of payload byte `x`, found by a plain walk (the reference translation).
  std::byte* PayloadByte(uint64_t x) {
    for (const ArenaExtent& e : extents) {
      if (x < e.length) return bytes.data() + e.offset + x;
      x -= e.length;
    }
    ADD_FAILURE() << "payload offset past the extents";
    return nullptr;
  }
};

// Copies what the plan says, as a runtime would (runs with a null dst are only read).
void Execute(const std::vector<storage::CopyRun>& runs) {
  for (const auto& run : runs) {
    if (run.dst != nullptr) std::memcpy(run.dst, run.src, run.size_bytes);
  }
}

struct Case {
  KvDtype dtype;
  EngineForm form;
  uint32_t chunk_tokens;         // tokens the chunk holds (< layout chunk for a partial chunk)
  uint32_t token_begin;          // first chunk token copied
  uint32_t num_tokens;           // tokens copied
  int64_t position_begin;        // engine position of token_begin
  bool scattered_blocks;         // block ids out of order
  std::vector<uint64_t> pieces;  // extent lengths (see Arena)
};

class CopyPlanTest : public ::testing::TestWithParam<Case> {};

constexpr uint32_t kLayers = 3;
constexpr uint32_t kHeads = 4;
constexpr uint32_t kDim = 8;
constexpr uint32_t kLayoutChunk = 64;
constexpr int64_t kBlocks = 24;
constexpr int64_t kBlockSize = 16;

std::vector<int32_t> BlockIds(bool scattered) {
  std::vector<int32_t> ids(kBlocks);
  std::iota(ids.begin(), ids.end(), 0);
  if (scattered) std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
  return ids;
}

// Reference: byte-by-element copy of every (layer, plane, token, head) row between the engine
// and the payload, each address computed from first principles.
void ReferenceCopy(const KvLayout& layout, const EngineCache& engine, Arena& arena, const Case& c,
                   const std::vector<int32_t>& block_ids, CopyDirection direction) {
  const uint64_t elem = DtypeSizeBytes(layout.dtype);
  const uint64_t head_bytes = layout.head_dim * elem;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    for (uint32_t p = 0; p < layout.planes_per_layer(); ++p) {
      for (uint32_t t = 0; t < c.num_tokens; ++t) {
        const int64_t position = c.position_begin + t;
        const int64_t block = block_ids[position / kBlockSize];
        const int64_t slot = position % kBlockSize;
        for (uint32_t h = 0; h < layout.num_kv_heads; ++h) {
          const uint64_t payload = layout.plane_offset(l, p, c.chunk_tokens) +
                                   (c.token_begin + t) * layout.plane_token_bytes() +
                                   h * head_bytes;
          std::byte* e = engine.Element(layout, l, p, block, slot, h);
          for (uint64_t b = 0; b < head_bytes; ++b) {
            std::byte* a = arena.PayloadByte(payload + b);
            if (direction == CopyDirection::kArenaToEngine) {
              e[b] = *a;
            } else {
              *a = e[b];
            }
          }
        }
      }
    }
  }
}

TEST_P(CopyPlanTest, LoadAndSaveAreByteExact) {
  const Case& c = GetParam();
  const KvLayout layout = MakeLayout(c.dtype, c.form, kLayers, kHeads, kDim, kLayoutChunk);
  const std::vector<int32_t> block_ids = BlockIds(c.scattered_blocks);
  for (CopyDirection direction : {CopyDirection::kArenaToEngine, CopyDirection::kEngineToArena}) {
    SCOPED_TRACE(direction == CopyDirection::kArenaToEngine ? "load" : "save");
    EngineCache engine(layout, c.form, kBlocks, kBlockSize, 11);
    EngineCache expected_engine(layout, c.form, kBlocks, kBlockSize, 11);
    Arena arena(layout.chunk_bytes(c.chunk_tokens), c.pieces, 5);
    Arena expected_arena(layout.chunk_bytes(c.chunk_tokens), c.pieces, 5);

    auto cache = ParsePagedKvCache(layout, engine.layers);
    ASSERT_TRUE(cache.ok()) << cache.status();
    const ChunkCopy copy{arena.extents, c.chunk_tokens,   c.token_begin,
                         c.num_tokens,  c.position_begin, block_ids};
    ASSERT_TRUE(ValidateChunkCopy(layout, *cache, arena.bytes.size(), copy).ok());
    std::vector<storage::CopyRun> runs;
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      AppendLayerRuns(layout, *cache, arena.bytes.data(), copy, l, direction, runs);
    }
    Execute(runs);

    ReferenceCopy(layout, expected_engine, expected_arena, c, block_ids, direction);
    ASSERT_EQ(engine.buffers.size(), expected_engine.buffers.size());
    for (size_t i = 0; i < engine.buffers.size(); ++i) {
      EXPECT_TRUE(engine.buffers[i] == expected_engine.buffers[i]) << "engine buffer " << i;
    }
    EXPECT_TRUE(arena.bytes == expected_arena.bytes) << "arena";
  }
}

// With whole_payload a load's runs, layer after layer, read the chunk's payload exactly once
// and in order (what a digest of their sources must equal), and still copy exactly the range.
TEST_P(CopyPlanTest, WholePayloadLoadReadsThePayloadOnceInOrder) {
  const Case& c = GetParam();
  const KvLayout layout = MakeLayout(c.dtype, c.form, kLayers, kHeads, kDim, kLayoutChunk);
  const std::vector<int32_t> block_ids = BlockIds(c.scattered_blocks);
  EngineCache engine(layout, c.form, kBlocks, kBlockSize, 11);
  EngineCache expected_engine(layout, c.form, kBlocks, kBlockSize, 11);
  Arena arena(layout.chunk_bytes(c.chunk_tokens), c.pieces, 5);
  auto cache = ParsePagedKvCache(layout, engine.layers);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const ChunkCopy copy{arena.extents, c.chunk_tokens,   c.token_begin,
                       c.num_tokens,  c.position_begin, block_ids};
  std::vector<storage::CopyRun> runs;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    AppendLayerRuns(layout, *cache, arena.bytes.data(), copy, l, CopyDirection::kArenaToEngine,
                    runs, /*whole_payload=*/true);
  }
  std::vector<std::byte> read, payload;
  for (const storage::CopyRun& run : runs) {
    const auto* src = static_cast<const std::byte*>(run.src);
    read.insert(read.end(), src, src + run.size_bytes);
  }
  for (const ArenaExtent& e : arena.extents) {
    payload.insert(payload.end(), arena.bytes.begin() + e.offset,
                   arena.bytes.begin() + e.offset + e.length);
  }
  EXPECT_TRUE(read == payload) << "read " << read.size() << " of " << payload.size() << " bytes";

  Execute(runs);
  Arena unchanged(layout.chunk_bytes(c.chunk_tokens), c.pieces, 5);
  ReferenceCopy(layout, expected_engine, unchanged, c, block_ids, CopyDirection::kArenaToEngine);
  for (size_t i = 0; i < engine.buffers.size(); ++i) {
    EXPECT_TRUE(engine.buffers[i] == expected_engine.buffers[i]) << "engine buffer " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forms, CopyPlanTest,
    ::testing::Values(
        // Full chunk, one extent, every form and dtype.
        Case{KvDtype::kBfloat16, EngineForm::kStackedNhd, 64, 0, 64, 0, true, {}},
        Case{KvDtype::kFloat16, EngineForm::kStackedNhd, 64, 0, 64, 32, false, {}},
        Case{KvDtype::kFloat32, EngineForm::kStackedNhd, 64, 0, 64, 16, true, {}},
        Case{KvDtype::kBfloat16, EngineForm::kStackedHnd, 64, 0, 64, 0, true, {}},
        Case{KvDtype::kFloat16, EngineForm::kStackedInterleave, 64, 0, 64, 0, true, {}},
        Case{KvDtype::kFloat32, EngineForm::kSeparate, 64, 0, 64, 64, true, {}},
        Case{KvDtype::kBfloat16, EngineForm::kSeparatePadded, 64, 0, 64, 0, true, {}},
        Case{KvDtype::kFloat16, EngineForm::kMla, 64, 0, 64, 0, true, {}},
        // Extents that cut layers and token rows at odd places (multiples of 64 bytes, as pages
        // are, and one that is not).
        Case{KvDtype::kBfloat16, EngineForm::kStackedNhd, 64, 0, 64, 0, true, {4096, 192, 6000}},
        Case{KvDtype::kFloat32, EngineForm::kSeparate, 64, 0, 64, 0, false, {64, 64, 8192, 100}},
        Case{KvDtype::kFloat16, EngineForm::kStackedHnd, 64, 0, 64, 0, true, {1000, 3000}},
        Case{KvDtype::kBfloat16, EngineForm::kMla, 64, 0, 64, 0, true, {640, 576}},
        // Partial chunks (a prompt's last chunk) and token sub-ranges (a load that starts at a
        // block boundary inside a chunk, or stops one token short of the prompt's end).
        Case{KvDtype::kBfloat16, EngineForm::kStackedNhd, 40, 0, 40, 64, true, {2048, 2048}},
        Case{KvDtype::kFloat16, EngineForm::kSeparate, 23, 0, 23, 0, true, {512}},
        Case{KvDtype::kFloat32, EngineForm::kStackedNhd, 64, 16, 48, 16, true, {3000}},
        Case{KvDtype::kBfloat16, EngineForm::kStackedHnd, 64, 32, 31, 96, true, {4096, 64}},
        Case{KvDtype::kFloat16, EngineForm::kSeparatePadded, 64, 5, 50, 37, true, {1536, 1600}},
        Case{KvDtype::kFloat16, EngineForm::kStackedInterleave, 50, 3, 40, 19, false, {700}}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return FormName(info.param.form) + "_" + DtypeName(info.param.dtype) + "_" +
             std::to_string(info.index);
    });

TEST(CopyPlanRunsTest, PackedLayoutIsAFewLargeRunsPerPlane) {
  const KvLayout layout =
      MakeLayout(KvDtype::kBfloat16, EngineForm::kStackedNhd, 2, kHeads, kDim, kLayoutChunk);
  EngineCache engine(layout, EngineForm::kStackedNhd, kBlocks, kBlockSize, 1);
  auto cache = ParsePagedKvCache(layout, engine.layers);
  ASSERT_TRUE(cache.ok());
  Arena arena(layout.chunk_bytes(64), {}, 2);
  const uint64_t row = layout.plane_token_bytes();

  // Scattered blocks: one run per block per plane (64 tokens = 4 blocks of 16).
  const std::vector<int32_t> scattered = {9, 3, 17, 0, 5};
  std::vector<storage::CopyRun> runs;
  AppendLayerRuns(layout, *cache, arena.bytes.data(), {arena.extents, 64, 0, 64, 0, scattered}, 1,
                  CopyDirection::kArenaToEngine, runs);
  ASSERT_EQ(runs.size(), 8u);
  for (const auto& run : runs) EXPECT_EQ(run.size_bytes, kBlockSize * row);

  // Consecutive blocks: each plane is one run.
  const std::vector<int32_t> consecutive = {4, 5, 6, 7};
  runs.clear();
  AppendLayerRuns(layout, *cache, arena.bytes.data(), {arena.extents, 64, 0, 64, 0, consecutive}, 0,
                  CopyDirection::kArenaToEngine, runs);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].size_bytes, 64 * row);
  // The K plane of layer 0 starts the payload.
  EXPECT_EQ(runs[0].src, arena.bytes.data() + arena.extents[0].offset);
}

TEST(CopyPlanValidateTest, RejectsWhatACopyCannotDo) {
  const KvLayout layout =
      MakeLayout(KvDtype::kBfloat16, EngineForm::kStackedNhd, 2, kHeads, kDim, kLayoutChunk);
  EngineCache engine(layout, EngineForm::kStackedNhd, kBlocks, kBlockSize, 1);
  auto cache = ParsePagedKvCache(layout, engine.layers);
  ASSERT_TRUE(cache.ok());
  Arena arena(layout.chunk_bytes(64), {1024}, 2);
  const std::vector<int32_t> blocks = {0, 1, 2, 3};
  const uint64_t arena_size = arena.bytes.size();
  auto check = [&](ChunkCopy copy) { return ValidateChunkCopy(layout, *cache, arena_size, copy); };
  EXPECT_TRUE(check({arena.extents, 64, 0, 64, 0, blocks}).ok());
  EXPECT_THAT(check({arena.extents, 65, 0, 64, 0, blocks}).message(), HasSubstr("chunks hold"));
  EXPECT_THAT(check({arena.extents, 64, 10, 60, 0, blocks}).message(), HasSubstr("outside"));
  EXPECT_THAT(check({arena.extents, 64, 0, 0, 0, blocks}).message(), HasSubstr("outside"));
  // Extents that do not hold the chunk exactly.
  Arena small(layout.chunk_bytes(63), {}, 3);
  EXPECT_THAT(check({small.extents, 64, 0, 64, 0, blocks}).message(), HasSubstr("hold"));
  // An extent past the end of the arena.
  std::vector<ArenaExtent> outside = arena.extents;
  outside[0].offset = arena_size;
  EXPECT_THAT(check({outside, 64, 0, 64, 0, blocks}).message(), HasSubstr("outside the arena"));
  // Not enough blocks for the positions, and a block id the cache does not have.
  EXPECT_THAT(check({arena.extents, 64, 0, 64, 16, blocks}).message(), HasSubstr("blocks"));
  const std::vector<int32_t> bad_block = {0, 1, kBlocks, 3};
  EXPECT_THAT(check({arena.extents, 64, 0, 64, 0, bad_block}).message(), HasSubstr("block id"));
  const std::vector<int32_t> negative = {0, -1, 2, 3};
  EXPECT_THAT(check({arena.extents, 64, 0, 64, 0, negative}).message(), HasSubstr("block id"));
}

// vLLM's CPU backend: per block, per head, K's block_size rows then V's, every layer one tensor
// viewed as stacked [2, nb, bs, h, d]. Its pages are copied whole, a page per block and layer.
TEST(CopyPlanOpaquePagesTest, PagesMoveWholeAndComeBackByteExact) {
  const KvLayout layout =
      MakeLayout(KvDtype::kBfloat16, EngineForm::kStackedNhd, 2, kHeads, kDim, kLayoutChunk);
  const int64_t h = kHeads, d = kDim, bs = kBlockSize, nb = kBlocks;
  const std::vector<int64_t> shape = {2, nb, bs, h, d};
  const std::vector<int64_t> strides = {bs * d, h * 2 * bs * d, d, 2 * bs * d, 1};
  std::vector<std::vector<std::byte>> buffers;
  std::vector<LayerKvCache> layers;
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    buffers.emplace_back(nb * h * 2 * bs * d * 2);
    FillRandom(buffers.back(), 40 + l);
    layers.push_back({.kv = {buffers.back().data(), shape, strides}});
  }
  auto cache = ParsePagedKvCache(layout, layers);
  ASSERT_TRUE(cache.ok()) << cache.status();
  UseOpaquePages(*cache);
  const uint64_t page = static_cast<uint64_t>(h * 2 * bs * d * 2);
  ASSERT_EQ(cache->geometry.page_bytes, page);

  // Save blocks {5, 2, 9, 11} (a chunk of 4 pages) and load them into {0, 1, 3, 4}.
  Arena arena(layout.chunk_bytes(64), {1000, 3000}, 5);
  const std::vector<int32_t> from = {5, 2, 9, 11}, to = {0, 1, 3, 4};
  for (uint32_t l = 0; l < layout.num_layers; ++l) {
    std::vector<storage::CopyRun> runs;
    AppendLayerRuns(layout, *cache, arena.bytes.data(), {arena.extents, 64, 0, 64, 0, from}, l,
                    CopyDirection::kEngineToArena, runs);
    Execute(runs);
    runs.clear();
    AppendLayerRuns(layout, *cache, arena.bytes.data(), {arena.extents, 64, 0, 64, 0, to}, l,
                    CopyDirection::kArenaToEngine, runs);
    Execute(runs);
    for (size_t b = 0; b < from.size(); ++b) {
      EXPECT_EQ(
          std::memcmp(buffers[l].data() + from[b] * page, buffers[l].data() + to[b] * page, page),
          0)
          << "layer " << l << " page " << b;
    }
  }
  // Pages of consecutive blocks merge; a chunk's layer is one run then.
  std::vector<storage::CopyRun> runs;
  Arena flat(layout.chunk_bytes(64), {}, 6);
  AppendLayerRuns(layout, *cache, flat.bytes.data(), {flat.extents, 64, 0, 64, 0, to}, 1,
                  CopyDirection::kArenaToEngine, runs);
  ASSERT_EQ(runs.size(), 2u) << "blocks 0-1 and 3-4";
  EXPECT_EQ(runs[0].size_bytes, 2 * page);
  // Only whole blocks: a range that starts or ends inside one is refused.
  const uint64_t size = flat.bytes.size();
  EXPECT_TRUE(ValidateChunkCopy(layout, *cache, size, {flat.extents, 64, 16, 48, 16, to}).ok());
  EXPECT_THAT(ValidateChunkCopy(layout, *cache, size, {flat.extents, 64, 0, 63, 0, to}).message(),
              HasSubstr("copied whole"));
  // Row layouts keep copying rows.
  EngineCache rows(layout, EngineForm::kStackedNhd, kBlocks, kBlockSize, 1);
  auto row_cache = ParsePagedKvCache(layout, rows.layers);
  ASSERT_TRUE(row_cache.ok());
  UseOpaquePages(*row_cache);
  EXPECT_EQ(row_cache->geometry.page_bytes, 0u);
}

// ---- ParsePagedKvCache ----------------------------------------------------------------------

TEST(PagedKvTest, ParsesEveryFormIntoOneGeometry) {
  for (EngineForm form :
       {EngineForm::kStackedNhd, EngineForm::kStackedHnd, EngineForm::kStackedInterleave,
        EngineForm::kSeparate, EngineForm::kSeparatePadded, EngineForm::kMla}) {
    SCOPED_TRACE(FormName(form));
    const KvLayout layout = MakeLayout(KvDtype::kFloat16, form, 2, kHeads, kDim, kLayoutChunk);
    EngineCache engine(layout, form, kBlocks, kBlockSize, 1);
    auto cache = ParsePagedKvCache(layout, engine.layers);
    ASSERT_TRUE(cache.ok()) << cache.status();
    EXPECT_EQ(cache->geometry.num_blocks, kBlocks);
    EXPECT_EQ(cache->geometry.block_size, kBlockSize);
    EXPECT_EQ(cache->geometry.num_planes, form == EngineForm::kMla ? 1u : 2u);
    EXPECT_EQ(cache->geometry.elem_bytes, 2u);
    EXPECT_EQ(cache->geometry.slots_contiguous(),
              form == EngineForm::kStackedNhd || form == EngineForm::kSeparate ||
                  form == EngineForm::kStackedInterleave || form == EngineForm::kMla);
  }
}

TEST(PagedKvTest, RejectsMismatchedTensors) {
  const KvLayout layout =
      MakeLayout(KvDtype::kBfloat16, EngineForm::kStackedNhd, 2, kHeads, kDim, kLayoutChunk);
  EngineCache engine(layout, EngineForm::kStackedNhd, kBlocks, kBlockSize, 1);
  auto parse = [&](std::vector<LayerKvCache> layers) {
    return ParsePagedKvCache(layout, layers).status();
  };
  EXPECT_TRUE(parse(engine.layers).ok());
  // Layer count.
  EXPECT_THAT(parse({engine.layers[0]}).message(), HasSubstr("1 layers given"));
  // Heads / head_dim that do not match the layout.
  auto wrong_heads = engine.layers;
  wrong_heads[1].kv.shape[3] = kHeads * 2;
  EXPECT_THAT(parse(wrong_heads).message(), HasSubstr("layer 1"));
  // Non-contiguous head_dim.
  auto strided_dim = engine.layers;
  for (auto& layer : strided_dim) layer.kv.strides[4] = 2;
  EXPECT_THAT(parse(strided_dim).message(), HasSubstr("stride"));
  // Overlapping slots.
  auto overlapping = engine.layers;
  for (auto& layer : overlapping) layer.kv.strides[2] = 1;
  EXPECT_THAT(parse(overlapping).message(), HasSubstr("overlap"));
  // Overlapping K and V planes (plane stride 0).
  auto same_planes = engine.layers;
  for (auto& layer : same_planes) layer.kv.strides[0] = 0;
  EXPECT_THAT(parse(same_planes).message(), HasSubstr("overlap"));
  // A layer whose geometry differs from layer 0's.
  auto different = engine.layers;
  different[1].kv.shape[1] = kBlocks - 1;
  EXPECT_THAT(parse(different).message(), HasSubstr("differs"));
  // Null data, bad rank, rank mismatch.
  auto null_data = engine.layers;
  null_data[0].kv.data = nullptr;
  EXPECT_THAT(parse(null_data).message(), HasSubstr("null"));
  auto bad_rank = engine.layers;
  bad_rank[0].kv.strides.pop_back();
  EXPECT_THAT(parse(bad_rank).message(), HasSubstr("strides"));
  auto four_dims = engine.layers;
  four_dims[0].kv.shape = {kBlocks, kBlockSize, kHeads, kDim};
  four_dims[0].kv.strides = {kBlockSize * kHeads * kDim, kHeads * kDim, kDim, 1};
  EXPECT_THAT(parse(four_dims).message(), HasSubstr("[2, num_blocks"));
  // K and V of different geometry.
  const KvLayout sep_layout =
      MakeLayout(KvDtype::kBfloat16, EngineForm::kSeparate, 2, kHeads, kDim, kLayoutChunk);
  EngineCache separate(sep_layout, EngineForm::kSeparate, kBlocks, kBlockSize, 1);
  auto mismatched = separate.layers;
  mismatched[0].v->strides[0] += 8;
  EXPECT_THAT(ParsePagedKvCache(sep_layout, mismatched).status().message(), HasSubstr("differ"));
  auto aliased = separate.layers;
  aliased[0].v->data = aliased[0].kv.data;
  EXPECT_THAT(ParsePagedKvCache(sep_layout, aliased).status().message(), HasSubstr("overlap"));
}

}  // namespace
}  // namespace strata::connector::internal
