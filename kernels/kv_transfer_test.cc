#include "kernels/kv_transfer.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing/test_util.h"

namespace strata::kernels {
namespace {

using testing::HostTensor;

struct Geometry {
  KvDtype dtype;
  int64_t planes, blocks, block_size, heads, dim, layers;
  bool hnd;
};

// One engine layer as vLLM's FlashAttention tensor [planes, blocks, B, H, D] (or HND).
struct EngineLayer {
  HostTensor tensor;
  PagedKvLayer view;
};

class KvTransferTest : public ::testing::TestWithParam<Geometry> {
 protected:
  PagedKvSpec Spec() const {
    const Geometry& g = GetParam();
    return g.hnd
               ? PagedKvSpec::ContiguousHnd(g.dtype, g.planes, g.blocks, g.block_size, g.heads,
                                            g.dim)
               : PagedKvSpec::Contiguous(g.dtype, g.planes, g.blocks, g.block_size, g.heads, g.dim);
  }
  std::vector<EngineLayer> MakeLayers(std::mt19937_64& rng, bool random) const {
    const Geometry& g = GetParam();
    const int64_t plane_elems = g.blocks * g.block_size * g.heads * g.dim;
    std::vector<EngineLayer> layers(static_cast<size_t>(g.layers));
    for (EngineLayer& l : layers) {
      l.tensor = HostTensor(g.dtype, g.planes * plane_elems);
      if (random) {
        l.tensor.FillNormal(rng);
      } else {
        l.tensor.Fill(0.0f);
      }
      l.view = PagedKvLayer::FromStackedPlanes(l.tensor.data(), g.dtype, g.planes, plane_elems,
                                               g.planes * plane_elems);
    }
    return layers;
  }
  static std::vector<PagedKvLayer> Views(const std::vector<EngineLayer>& layers) {
    std::vector<PagedKvLayer> out;
    for (const EngineLayer& l : layers) out.push_back(l.view);
    return out;
  }
  // Independent index formulas.
  float PagedAt(const EngineLayer& l, int64_t plane, int64_t block, int64_t slot, int64_t h,
                int64_t d) const {
    const Geometry& g = GetParam();
    const int64_t plane_elems = g.blocks * g.block_size * g.heads * g.dim;
    const int64_t inner =
        g.hnd ? (h * g.block_size + slot) * g.dim + d : (slot * g.heads + h) * g.dim + d;
    return l.tensor.Get(plane * plane_elems + block * g.block_size * g.heads * g.dim + inner);
  }
  float ChunkAt(const HostTensor& c, int64_t chunk_tokens, int64_t layer, int64_t plane,
                int64_t token, int64_t h, int64_t d) const {
    const Geometry& g = GetParam();
    return c.Get((((layer * g.planes + plane) * chunk_tokens + token) * g.heads + h) * g.dim + d);
  }
};

TEST_P(KvTransferTest, GatherThenScatterRoundTripsThroughTheBlockTable) {
  const Geometry& g = GetParam();
  std::mt19937_64 rng(11);
  std::vector<EngineLayer> source = MakeLayers(rng, /*random=*/true);
  const ChunkGeometry geometry{g.dtype, g.layers, g.planes, g.heads, g.dim};
  // A block table for one request, in scrambled physical order.
  std::vector<int32_t> table(static_cast<size_t>(g.blocks));
  for (int64_t i = 0; i < g.blocks; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::shuffle(table.begin(), table.end(), rng);
  // Chunk 0: 2.5 blocks from the start; chunk 1: a partial range starting mid-block, of a chunk
  // that holds more tokens than are copied.
  const int64_t c0_tokens = g.block_size * 2 + g.block_size / 2;
  const int64_t c1_tokens = g.block_size * 2;
  HostTensor chunk0(g.dtype, g.layers * g.planes * c0_tokens * g.heads * g.dim);
  HostTensor chunk1(g.dtype, g.layers * g.planes * c1_tokens * g.heads * g.dim);
  chunk0.Fill(-7.0f);
  chunk1.Fill(-7.0f);
  const int64_t c1_copy = g.block_size + 1;
  const std::vector<ChunkCopy> copies = {
      {chunk0.data(), c0_tokens, 0, c0_tokens, 0, 0},
      {chunk1.data(), c1_tokens, 1, c1_copy, 2, g.block_size / 2},
  };
  absl::StatusOr<TransferPlan> plan = TransferPlan::Create(Spec(), geometry, copies, table);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::vector<PagedKvLayer> views = Views(source);
  ASSERT_TRUE(GatherKv(*plan, views, 0).ok());

  auto slot_of = [&](const ChunkCopy& c, int64_t i, int64_t& block, int64_t& slot) {
    const int64_t linear = c.slot_begin + i;
    block = table[static_cast<size_t>(c.block_table_begin + linear / g.block_size)];
    slot = linear % g.block_size;
  };
  for (int64_t layer = 0; layer < g.layers; ++layer) {
    for (int64_t plane = 0; plane < g.planes; ++plane) {
      for (int64_t ci = 0; ci < 2; ++ci) {
        const ChunkCopy& c = copies[static_cast<size_t>(ci)];
        const HostTensor& chunk = ci == 0 ? chunk0 : chunk1;
        for (int64_t tok = 0; tok < c.chunk_tokens; ++tok) {
          const bool copied = tok >= c.token_begin && tok < c.token_begin + c.num_tokens;
          int64_t block = 0;
          int64_t slot = 0;
          if (copied) slot_of(c, tok - c.token_begin, block, slot);
          for (int64_t h = 0; h < g.heads; ++h) {
            for (int64_t d = 0; d < g.dim; ++d) {
              const float got = ChunkAt(chunk, c.chunk_tokens, layer, plane, tok, h, d);
              const float want =
                  copied ? PagedAt(source[static_cast<size_t>(layer)], plane, block, slot, h, d)
                         : -7.0f;
              ASSERT_EQ(got, want)
                  << "layer " << layer << " plane " << plane << " chunk " << ci << " token " << tok;
            }
          }
        }
      }
    }
  }

  // Scatter back into zeroed engine layers, one layer per call (the layer-wise pipeline).
  std::vector<EngineLayer> dest = MakeLayers(rng, /*random=*/false);
  for (int64_t layer = 0; layer < g.layers; ++layer) {
    ASSERT_TRUE(ScatterKvLayer(*plan, dest[static_cast<size_t>(layer)].view, layer).ok());
  }
  std::vector<bool> written(static_cast<size_t>(g.blocks * g.block_size), false);
  for (const ChunkCopy& c : copies) {
    for (int64_t i = 0; i < c.num_tokens; ++i) {
      int64_t block = 0;
      int64_t slot = 0;
      slot_of(c, i, block, slot);
      written[static_cast<size_t>(block * g.block_size + slot)] = true;
    }
  }
  for (int64_t layer = 0; layer < g.layers; ++layer) {
    for (int64_t plane = 0; plane < g.planes; ++plane) {
      for (int64_t b = 0; b < g.blocks; ++b) {
        for (int64_t s = 0; s < g.block_size; ++s) {
          for (int64_t h = 0; h < g.heads; ++h) {
            for (int64_t d = 0; d < g.dim; ++d) {
              const float want =
                  written[static_cast<size_t>(b * g.block_size + s)]
                      ? PagedAt(source[static_cast<size_t>(layer)], plane, b, s, h, d)
                      : 0.0f;
              ASSERT_EQ(PagedAt(dest[static_cast<size_t>(layer)], plane, b, s, h, d), want);
            }
          }
        }
      }
    }
  }
}

TEST_P(KvTransferTest, LayerRangesMatchTheWholeCopy) {
  const Geometry& g = GetParam();  // every case has at least 2 layers
  std::mt19937_64 rng(5);
  std::vector<EngineLayer> source = MakeLayers(rng, true);
  const ChunkGeometry geometry{g.dtype, g.layers, g.planes, g.heads, g.dim};
  std::vector<int32_t> table = {1, 0};
  const int64_t tokens = g.block_size + 1;
  HostTensor whole(g.dtype, g.layers * g.planes * tokens * g.heads * g.dim);
  HostTensor split(g.dtype, whole.size());
  whole.Fill(0);
  split.Fill(0);
  auto whole_plan = TransferPlan::Create(
      Spec(), geometry, std::vector<ChunkCopy>{{whole.data(), tokens, 0, tokens, 0, 0}}, table);
  auto split_plan = TransferPlan::Create(
      Spec(), geometry, std::vector<ChunkCopy>{{split.data(), tokens, 0, tokens, 0, 0}}, table);
  ASSERT_TRUE(whole_plan.ok() && split_plan.ok());
  const std::vector<PagedKvLayer> views = Views(source);
  ASSERT_TRUE(GatherKv(*whole_plan, views, 0).ok());
  ASSERT_TRUE(GatherKv(*split_plan, std::span(views).subspan(0, 1), 0).ok());
  ASSERT_TRUE(GatherKv(*split_plan, std::span(views).subspan(1), 1).ok());
  EXPECT_EQ(std::memcmp(whole.data(), split.data(), static_cast<size_t>(whole.size_bytes())), 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, KvTransferTest,
                         ::testing::Values(Geometry{KvDtype::kBfloat16, 2, 6, 4, 2, 8, 3, false},
                                           Geometry{KvDtype::kFloat16, 2, 5, 8, 3, 4, 2, true},
                                           Geometry{KvDtype::kFloat32, 2, 7, 2, 1, 16, 3, false},
                                           Geometry{KvDtype::kBfloat16, 1, 6, 4, 1, 12, 3,
                                                    false},  // MLA: one plane
                                           Geometry{KvDtype::kFloat32, 1, 5, 4, 2, 6, 2, true}));

TEST(KvTransferLayoutTest, SeparatePlanesAndStridedDims) {
  // K and V as separate tensors, head_dim strided by 2 (every other element), as an exotic layout.
  const int64_t blocks = 3, bs = 2, heads = 2, dim = 3;
  PagedKvSpec spec{KvDtype::kFloat32, 2,       blocks, bs, heads, dim, bs * heads * dim * 2,
                   heads * dim * 2,   dim * 2, 2};
  const int64_t extent = spec.PlaneExtentElems();
  std::vector<float> k(static_cast<size_t>(extent)), v(static_cast<size_t>(extent));
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i);
    v[i] = -static_cast<float>(i);
  }
  const PagedKvLayer layer = PagedKvLayer::FromSeparatePlanes(k.data(), extent, v.data(), extent);
  std::vector<float> chunk(static_cast<size_t>(2 * 3 * heads * dim), 0.0f);
  std::vector<int32_t> table = {2, 0};
  auto plan = TransferPlan::Create(spec, {KvDtype::kFloat32, 1, 2, heads, dim},
                                   std::vector<ChunkCopy>{{chunk.data(), 3, 0, 3, 0, 1}}, table);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(GatherKvLayer(*plan, layer, 0).ok());
  // token 0 -> block 2 slot 1, token 1 -> block 0 slot 0, token 2 -> block 0 slot 1.
  const int64_t blocks_of[3] = {2, 0, 0}, slots_of[3] = {1, 0, 1};
  for (int64_t plane = 0; plane < 2; ++plane) {
    for (int64_t t = 0; t < 3; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t d = 0; d < dim; ++d) {
          const int64_t off = spec.SlotOffset(blocks_of[t], slots_of[t]) + h * spec.head_stride +
                              d * spec.dim_stride;
          const float want = plane == 0 ? k[static_cast<size_t>(off)] : v[static_cast<size_t>(off)];
          EXPECT_EQ(chunk[static_cast<size_t>(((plane * 3 + t) * heads + h) * dim + d)], want);
        }
      }
    }
  }
}

class KvTransferValidationTest : public ::testing::Test {
 protected:
  PagedKvSpec spec_ = PagedKvSpec::Contiguous(KvDtype::kFloat16, 2, 4, 4, 2, 8);
  ChunkGeometry geometry_{KvDtype::kFloat16, 2, 2, 2, 8};
  std::vector<uint16_t> chunk_ = std::vector<uint16_t>(2 * 2 * 8 * 2 * 8);
  std::vector<int32_t> table_ = {3, 1, 0, 2};

  absl::Status Create(std::vector<ChunkCopy> copies, const PagedKvSpec* spec = nullptr,
                      const ChunkGeometry* geometry = nullptr) {
    return TransferPlan::Create(spec ? *spec : spec_, geometry ? *geometry : geometry_, copies,
                                table_)
        .status();
  }
};

TEST_F(KvTransferValidationTest, RejectsBadCopies) {
  void* c = chunk_.data();
  EXPECT_TRUE(Create({{c, 8, 0, 8, 0, 0}}).ok());
  EXPECT_EQ(Create({{nullptr, 8, 0, 8, 0, 0}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create({{c, 8, 4, 5, 0, 0}}).code(), absl::StatusCode::kInvalidArgument);  // > tokens
  EXPECT_EQ(Create({{c, 8, -1, 2, 0, 0}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create({{c, 8, 0, 0, 0, 0}}).code(), absl::StatusCode::kInvalidArgument);  // empty
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 4}}).code(), absl::StatusCode::kInvalidArgument);  // slot
  EXPECT_EQ(Create({{c, 8, 0, 8, 3, 0}}).code(), absl::StatusCode::kInvalidArgument);  // table end
  EXPECT_EQ(Create({{c, 8, 0, 8, -1, 0}}).code(), absl::StatusCode::kInvalidArgument);
  table_[1] = 4;  // block id out of range
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 0}}).code(), absl::StatusCode::kInvalidArgument);
  table_[1] = -1;
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 0}}).code(), absl::StatusCode::kInvalidArgument);
  table_[1] = 1;
  // The same slot twice (same table entry), the same chunk token twice, overlapping chunks.
  EXPECT_EQ(Create({{c, 8, 0, 2, 0, 0}, {c, 8, 2, 2, 0, 1}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create({{c, 8, 0, 2, 0, 0}, {c, 8, 1, 2, 1, 0}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Create({{c, 8, 0, 2, 0, 0}, {chunk_.data() + 1, 4, 0, 2, 1, 0}}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Create({{c, 8, 0, 2, 0, 0}, {c, 8, 2, 2, 1, 0}}).ok());  // disjoint parts of one chunk
}

TEST_F(KvTransferValidationTest, RejectsMismatchedGeometryAndSpecs) {
  void* c = chunk_.data();
  ChunkGeometry g = geometry_;
  g.dtype = KvDtype::kBfloat16;
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 0}}, nullptr, &g).code(), absl::StatusCode::kInvalidArgument);
  g = geometry_;
  g.num_kv_heads = 1;
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 0}}, nullptr, &g).code(), absl::StatusCode::kInvalidArgument);
  PagedKvSpec s = spec_;
  s.dtype = KvDtype::kInt8;
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 0}}, &s).code(), absl::StatusCode::kInvalidArgument);
  s = spec_;
  s.slot_stride = 8;  // slots overlap heads: a scatter would write elements twice
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 0}}, &s).code(), absl::StatusCode::kInvalidArgument);
  s = spec_;
  s.block_stride = -1;
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 0}}, &s).code(), absl::StatusCode::kInvalidArgument);
  s = spec_;
  s.num_blocks = 0;
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 0}}, &s).code(), absl::StatusCode::kInvalidArgument);
  s = spec_;
  s.block_stride = int64_t{1} << 62;  // offsets overflow int64
  EXPECT_EQ(Create({{c, 8, 0, 8, 0, 0}}, &s).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(KvTransferValidationTest, RejectsBadLayers) {
  auto plan = TransferPlan::Create(spec_, geometry_,
                                   std::vector<ChunkCopy>{{chunk_.data(), 8, 0, 8, 0, 0}}, table_);
  ASSERT_TRUE(plan.ok());
  const int64_t extent = spec_.PlaneExtentElems();
  std::vector<uint16_t> k(static_cast<size_t>(extent)), v(static_cast<size_t>(extent));
  PagedKvLayer good = PagedKvLayer::FromSeparatePlanes(k.data(), extent, v.data(), extent);
  EXPECT_TRUE(GatherKvLayer(*plan, good, 1).ok());
  EXPECT_EQ(GatherKvLayer(*plan, good, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GatherKvLayer(*plan, good, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GatherKv(*plan, {}, 0).code(), absl::StatusCode::kInvalidArgument);
  PagedKvLayer short_v = PagedKvLayer::FromSeparatePlanes(k.data(), extent, v.data(), extent - 1);
  EXPECT_EQ(ScatterKvLayer(*plan, short_v, 0).code(), absl::StatusCode::kInvalidArgument);
  PagedKvLayer null_v = PagedKvLayer::FromSeparatePlanes(k.data(), extent, nullptr, extent);
  EXPECT_EQ(ScatterKvLayer(*plan, null_v, 0).code(), absl::StatusCode::kInvalidArgument);
  std::vector<PagedKvLayer> three(3, good);
  EXPECT_EQ(GatherKv(*plan, three, 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvTransferGeometryTest, MatchesKvLayoutOffsets) {
  KvLayout layout;
  layout.model_id = "m";
  layout.num_layers = 3;
  layout.num_kv_heads = 2;
  layout.head_dim = 4;
  layout.dtype = KvDtype::kBfloat16;
  const ChunkGeometry g = ChunkGeometry::FromKvLayout(layout);
  for (uint32_t layer = 0; layer < 3; ++layer) {
    for (uint32_t plane = 0; plane < 2; ++plane) {
      EXPECT_EQ(g.TokenOffset(16, layer, plane, 5) * 2,
                static_cast<int64_t>(layout.plane_offset(layer, plane, 16) +
                                     5 * layout.plane_token_bytes()));
    }
  }
  EXPECT_EQ(g.TokenOffset(16, 3, 0, 0) * 2, static_cast<int64_t>(layout.chunk_bytes(16)));
  layout.kind = KvKind::kMlaLatent;
  EXPECT_EQ(ChunkGeometry::FromKvLayout(layout).num_planes, 1);
}

}  // namespace
}  // namespace strata::kernels
