// Random shapes, strides, extents and metadata into every CPU entry point. Each call must either
// succeed, and then produce the right result, or return kInvalidArgument; it must never crash or
// touch memory outside the buffers it was given (every buffer is allocated at exactly the extent
// the call is told, so the ASan build catches any stray access).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/blend.h"
#include "kernels/internal/validate.h"
#include "kernels/kv_transfer.h"
#include "kernels/page_scores.h"
#include "kernels/paged_attention.h"
#include "kernels/quant.h"
#include "kernels/rope.h"
#include "kernels/testing/test_util.h"
#include "kernels/topk.h"

#ifndef STRATA_ROBUSTNESS_ITERATIONS
#define STRATA_ROBUSTNESS_ITERATIONS 150
#endif

namespace strata::kernels {
namespace {

using testing::HostTensor;

constexpr int kIterations = STRATA_ROBUSTNESS_ITERATIONS;
constexpr int64_t kMaxAlloc = 1 << 16;  // elements; larger claims are never made

class Fuzz {
 public:
  explicit Fuzz(uint64_t seed) : rng_(seed) {}
  std::mt19937_64& rng() { return rng_; }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  // Usually a value in [lo, hi]; sometimes 0, negative, or absurdly large.
  int64_t Dim(int64_t lo, int64_t hi) {
    if (Chance(0.04)) return 0;
    if (Chance(0.03)) return -Uniform(1, 3);
    if (Chance(0.02)) return int64_t{1} << Uniform(31, 62);
    return Uniform(lo, hi);
  }
  KvDtype Dtype() {
    if (Chance(0.05)) return Chance(0.5) ? KvDtype::kInt8 : KvDtype::kFp8E4m3;
    const KvDtype d[] = {KvDtype::kFloat16, KvDtype::kBfloat16, KvDtype::kFloat32};
    return d[Uniform(0, 2)];
  }
  // Largest offset + 1 for (size, stride) dims, or nullopt when the shape is invalid.
  static std::optional<int64_t> Reach(std::initializer_list<internal::DimStride> dims) {
    absl::StatusOr<int64_t> m = internal::MaxOffset(dims, "fuzz");
    if (!m.ok() || *m == INT64_MAX) return std::nullopt;
    return *m + 1;
  }
  // An allocation size for a view reaching `reach` elements: usually exact, sometimes one short
  // (the call must then refuse), never above kMaxAlloc.
  int64_t Extent(std::optional<int64_t> reach) {
    int64_t e = reach ? *reach : Uniform(1, 64);
    if (Chance(0.1)) e -= 1;
    return std::clamp<int64_t>(e, 1, kMaxAlloc);
  }

 private:
  std::mt19937_64 rng_;
};

void ExpectOkOrInvalid(const absl::Status& s) {
  ASSERT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << s;
}

// Counts calls that succeeded, so a sweep that rejects everything is noticed.
struct Tally {
  int ok = 0;
  int invalid = 0;
  void Add(const absl::Status& s) { (s.ok() ? ok : invalid) += 1; }
};

TEST(RobustnessTest, GatherScatter) {
  Fuzz f(1);
  Tally tally;
  for (int it = 0; it < kIterations; ++it) {
    PagedKvSpec spec;
    spec.dtype = f.Dtype();
    spec.num_planes = f.Chance(0.05) ? f.Uniform(-1, 3) : f.Uniform(1, 2);
    spec.num_blocks = f.Dim(1, 6);
    spec.block_size = f.Dim(1, 5);
    spec.num_kv_heads = f.Dim(1, 3);
    spec.head_dim = f.Dim(1, 6);
    if (f.Chance(0.6)) {
      const PagedKvSpec c =
          f.Chance(0.5)
              ? PagedKvSpec::Contiguous(spec.dtype, spec.num_planes, spec.num_blocks,
                                        spec.block_size, spec.num_kv_heads, spec.head_dim)
              : PagedKvSpec::ContiguousHnd(spec.dtype, spec.num_planes, spec.num_blocks,
                                           spec.block_size, spec.num_kv_heads, spec.head_dim);
      spec = c;
    } else {
      spec.block_stride = f.Uniform(-1, 200);
      spec.slot_stride = f.Uniform(-1, 40);
      spec.head_stride = f.Uniform(-1, 12);
      spec.dim_stride = f.Uniform(-1, 3);
    }
    const auto reach = Fuzz::Reach({{spec.num_blocks, spec.block_stride},
                                    {spec.block_size, spec.slot_stride},
                                    {spec.num_kv_heads, spec.head_stride},
                                    {spec.head_dim, spec.dim_stride}});
    const KvDtype buffer_dtype = IsFloatDtype(spec.dtype) ? spec.dtype : KvDtype::kFloat32;
    ChunkGeometry geometry{f.Chance(0.95) ? spec.dtype : f.Dtype(), f.Dim(1, 3),
                           f.Chance(0.95) ? spec.num_planes : f.Uniform(0, 3),
                           f.Chance(0.95) ? spec.num_kv_heads : f.Uniform(0, 4),
                           f.Chance(0.95) ? spec.head_dim : f.Uniform(0, 7)};
    const bool geometry_sane = geometry.num_layers > 0 && geometry.num_layers < 8 &&
                               geometry.num_planes >= 1 && geometry.num_planes <= 2 &&
                               geometry.num_kv_heads > 0 && geometry.num_kv_heads < 8 &&
                               geometry.head_dim > 0 && geometry.head_dim < 8;
    // Chunks: exact allocations for what each copy claims.
    const int copies_n = static_cast<int>(f.Uniform(0, 3));
    std::vector<HostTensor> chunk_buffers;
    std::vector<ChunkCopy> copies;
    std::vector<int32_t> table(static_cast<size_t>(f.Uniform(0, 8)));
    for (auto& b : table)
      b = static_cast<int32_t>(f.Uniform(-1, std::clamp<int64_t>(spec.num_blocks, 0, 8)));
    for (int c = 0; c < copies_n; ++c) {
      ChunkCopy copy;
      copy.chunk_tokens = f.Chance(0.05) ? f.Uniform(-1, 0) : f.Uniform(1, 9);
      const int64_t elems = geometry_sane && copy.chunk_tokens > 0
                                ? geometry.num_layers * geometry.num_planes * copy.chunk_tokens *
                                      geometry.num_kv_heads * geometry.head_dim
                                : 0;
      if (elems == 0) copy.chunk_tokens = f.Chance(0.5) ? 0 : -1;  // never claim what is not there
      chunk_buffers.emplace_back(buffer_dtype, std::max<int64_t>(elems, 1));
      copy.chunk = f.Chance(0.05) ? nullptr : chunk_buffers.back().data();
      copy.token_begin = f.Uniform(-1, 4);
      copy.num_tokens = f.Uniform(-1, 6);
      copy.block_table_begin = f.Uniform(-1, static_cast<int64_t>(table.size()));
      copy.slot_begin = f.Uniform(-1, 5);
      copies.push_back(copy);
    }
    absl::StatusOr<TransferPlan> plan = TransferPlan::Create(spec, geometry, copies, table);
    ExpectOkOrInvalid(plan.status());
    tally.Add(plan.status());
    if (!plan.ok()) continue;
    // Engine layers: exact allocations (sometimes one element short), random layer range.
    const int64_t layers_n = f.Uniform(0, std::min<int64_t>(geometry.num_layers + 1, 4));
    const int64_t first_layer = f.Uniform(-1, geometry.num_layers);
    std::vector<HostTensor> planes;
    std::vector<PagedKvLayer> layers;
    for (int64_t l = 0; l < layers_n; ++l) {
      PagedKvLayer layer;
      for (int64_t p = 0; p < spec.num_planes; ++p) {
        const int64_t extent = f.Extent(reach);
        planes.emplace_back(spec.dtype, extent);
        planes.back().FillNormal(f.rng());
        layer.planes[p] = f.Chance(0.03) ? nullptr : planes.back().data();
        layer.extent_elems[p] = extent;
      }
      layers.push_back(layer);
    }
    const bool gather = f.Chance(0.5);
    const absl::Status s =
        gather ? GatherKv(*plan, layers, first_layer) : ScatterKv(*plan, layers, first_layer);
    ExpectOkOrInvalid(s);
    tally.Add(s);
    if (!s.ok()) continue;
    // Every planned token now holds the same bytes on both sides.
    const int64_t esize = DtypeSizeBytes(spec.dtype);
    for (size_t l = 0; l < layers.size(); ++l) {
      for (int64_t p = 0; p < spec.num_planes; ++p) {
        for (const TransferPlan::TokenOp& op : plan->ops()) {
          const auto& chunk = plan->chunks()[op.chunk];
          for (int64_t h = 0; h < spec.num_kv_heads; ++h) {
            for (int64_t d = 0; d < spec.head_dim; ++d) {
              const auto* paged =
                  static_cast<const std::byte*>(layers[l].planes[p]) +
                  (op.slot_offset + h * spec.head_stride + d * spec.dim_stride) * esize;
              const auto* chunk_elem =
                  static_cast<const std::byte*>(chunk.data) +
                  (geometry.TokenOffset(chunk.chunk_tokens, first_layer + static_cast<int64_t>(l),
                                        p, op.token) +
                   h * spec.head_dim + d) *
                      esize;
              ASSERT_EQ(std::memcmp(paged, chunk_elem, static_cast<size_t>(esize)), 0);
            }
          }
        }
      }
    }
  }
  EXPECT_GT(tally.ok, kIterations / 20);
  EXPECT_GT(tally.invalid, kIterations / 20);
}

TEST(RobustnessTest, Rope) {
  Fuzz f(2);
  Tally tally;
  for (int it = 0; it < kIterations; ++it) {
    RopeConfig rc;
    rc.rotary_dim = 2 * f.Uniform(1, 8);
    rc.style = f.Chance(0.5) ? RopeStyle::kNeox : RopeStyle::kGptj;
    rc.max_position = f.Uniform(1, 64);
    rc.precision = AnglePrecision::kFp64;
    if (f.Chance(0.3)) rc.scaling = RopeScaling::kLlama3;
    const RopeTable table = *RopeTable::Create(rc);
    const KvDtype dtype = f.Dtype();
    const int64_t tokens = f.Dim(1, 5), heads = f.Dim(1, 3), dim = f.Dim(1, 20);
    int64_t head_stride = dim, token_stride = SaturatingMul(heads, dim);
    if (f.Chance(0.4)) {
      head_stride = f.Uniform(-1, 30);
      token_stride = f.Uniform(-1, 80);
    }
    const auto reach = Fuzz::Reach({{tokens, token_stride}, {heads, head_stride}, {dim, 1}});
    const int64_t extent = f.Extent(reach);
    HostTensor in(IsFloatDtype(dtype) ? dtype : KvDtype::kFloat32, extent);
    in.FillNormal(f.rng());
    const HostTensor original = in;
    const bool in_place = f.Chance(0.5);
    HostTensor out(in.dtype(), in_place ? 1 : f.Extent(reach));
    out.Fill(0);
    const ConstHeadsView iv{f.Chance(0.03) ? nullptr : in.data(),
                            dtype,
                            tokens,
                            heads,
                            dim,
                            token_stride,
                            head_stride,
                            extent};
    const bool rerotate = f.Chance(0.3);  // always in place
    const bool into_in = in_place || rerotate;
    const HeadsView ov{
        into_in ? in.data() : out.data(), dtype, tokens, heads, dim, token_stride, head_stride,
        into_in ? extent : out.size()};
    std::vector<int64_t> pos(static_cast<size_t>(std::clamp<int64_t>(tokens, 0, 8)));
    for (auto& p : pos) p = f.Chance(0.05) ? rc.max_position : f.Uniform(0, rc.max_position - 1);
    if (f.Chance(0.05)) pos.push_back(0);
    std::vector<int64_t> new_pos = pos;
    for (auto& p : new_pos) p = f.Uniform(0, rc.max_position - 1);
    const absl::Status s =
        rerotate ? ReRotateRope(table, ov, pos, new_pos) : ApplyRope(table, iv, ov, pos);
    ExpectOkOrInvalid(s);
    tally.Add(s);
    if (!s.ok()) continue;
    const HostTensor& result = into_in ? in : out;
    const std::vector<double> inv = testing::InvFreqF64(rc);
    double max_abs = 1e-30;
    for (int64_t i = 0; i < original.size(); ++i)
      max_abs = std::max(max_abs, double{std::fabs(original.Get(i))});
    const double tol = (dtype == KvDtype::kFloat32 ? 1e-5 : 1.5e-2) * max_abs;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<double> want(static_cast<size_t>(dim));
        const int64_t base = t * token_stride + h * head_stride;
        for (int64_t d = 0; d < dim; ++d) want[d] = original.Get(base + d);
        if (rerotate) {
          testing::RopeF64(want, rc, inv, static_cast<double>(new_pos[t] - pos[t]));
        } else {
          testing::RopeF64(want, rc, inv, static_cast<double>(pos[t]));
        }
        for (int64_t d = 0; d < dim; ++d) ASSERT_NEAR(result.Get(base + d), want[d], tol);
      }
    }
  }
  EXPECT_GT(tally.ok, kIterations / 20);
  EXPECT_GT(tally.invalid, kIterations / 20);
}

TEST(RobustnessTest, PagedAttention) {
  Fuzz f(3);
  Tally tally;
  for (int it = 0; it < kIterations; ++it) {
    const KvDtype kv_dtype = f.Chance(0.7) ? KvDtype::kFloat32 : f.Dtype();
    const int64_t block_size = f.Dim(1, 5), kv_heads = f.Dim(1, 2), dim = f.Dim(1, 12);
    const int64_t group = f.Chance(0.05) ? 0 : f.Uniform(1, 3);
    int64_t q_heads = SaturatingMul(kv_heads, group);
    if (f.Chance(0.05) && q_heads < INT64_MAX) q_heads += 1;
    const int64_t num_seqs = f.Uniform(0, 3), max_blocks = f.Dim(1, 4), num_blocks = f.Dim(1, 8);
    if (block_size <= 0 || block_size > 8 || kv_heads <= 0 || kv_heads > 4 || dim <= 0 ||
        dim > 16 || max_blocks <= 0 || max_blocks > 8 || num_blocks <= 0 || num_blocks > 16 ||
        q_heads <= 0) {
      // Hopeless dims: only the shape check runs; give it small real buffers.
      std::vector<float> buf(64);
      PagedAttentionArgs a;
      a.q = ConstHeadsView{buf.data(), KvDtype::kFloat32, 1, q_heads, dim, 0, 0, 64};
      a.out = HeadsView{buf.data(), KvDtype::kFloat32, 1, q_heads, dim, 0, 0, 64};
      a.kv_spec = PagedKvSpec::Contiguous(kv_dtype, 2, num_blocks, block_size, kv_heads, dim);
      a.kv = PagedKvLayer::FromSeparatePlanes(buf.data(), 64, buf.data(), 64);
      const absl::Status s = PagedAttention(a);
      ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      tally.Add(s);
      continue;
    }
    PagedKvSpec spec = PagedKvSpec::Contiguous(kv_dtype, 2, num_blocks, block_size, kv_heads, dim);
    const int64_t plane = spec.PlaneExtentElems();
    HostTensor k(IsFloatDtype(kv_dtype) ? kv_dtype : KvDtype::kFloat32, f.Extent(plane));
    HostTensor v(k.dtype(), f.Extent(plane));
    k.FillNormal(f.rng());
    v.FillNormal(f.rng());
    std::vector<int32_t> seq_lens, qsl = {0};
    std::vector<int32_t> table(static_cast<size_t>(num_seqs * max_blocks) +
                               (f.Chance(0.05) ? 1 : 0));
    for (auto& b : table)
      b = static_cast<int32_t>(f.Chance(0.03) ? num_blocks : f.Uniform(0, num_blocks - 1));
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t len = f.Uniform(0, max_blocks * block_size + (f.Chance(0.05) ? 1 : 0));
      const int64_t ql = std::min<int64_t>(f.Uniform(0, 3), len + (f.Chance(0.05) ? 1 : 0));
      seq_lens.push_back(static_cast<int32_t>(len));
      qsl.push_back(static_cast<int32_t>(qsl.back() + ql));
    }
    if (f.Chance(0.05)) qsl.back() += 1;
    const int64_t tokens = std::max<int32_t>(qsl.back(), 1);
    HostTensor q(KvDtype::kFloat32, tokens * q_heads * dim), out(KvDtype::kFloat32, q.size());
    q.FillNormal(f.rng());
    RopeConfig rc;
    rc.rotary_dim = 2 * f.Uniform(1, std::max<int64_t>(dim / 2, 1));
    rc.max_position = f.Uniform(4, 64);
    rc.precision = AnglePrecision::kFp64;
    rc.style = f.Chance(0.5) ? RopeStyle::kNeox : RopeStyle::kGptj;
    const RopeTable table_rope = *RopeTable::Create(rc);
    std::vector<int64_t> qpos(static_cast<size_t>(tokens)), bpos;
    for (auto& p : qpos) p = f.Uniform(0, rc.max_position - (f.Chance(0.05) ? 0 : 1));
    if (f.Chance(0.3)) {
      bpos.resize(table.size());
      for (auto& p : bpos) p = f.Uniform(-1, rc.max_position / 2);
    }
    PagedAttentionArgs a;
    a.q = ConstHeadsView::Dense(q.data(), q.dtype(), tokens, q_heads, dim);
    a.out = HeadsView::Dense(out.data(), out.dtype(), tokens, q_heads, dim);
    a.kv_spec = spec;
    a.kv = PagedKvLayer::FromSeparatePlanes(k.data(), k.size(), v.data(), v.size());
    a.block_table = table;
    a.max_blocks_per_seq = max_blocks;
    a.seq_lens = seq_lens;
    a.query_start_loc = qsl;
    a.query_positions = qpos;
    a.block_positions = bpos;
    if (f.Chance(0.8)) a.rope = table_rope.view();
    a.causal = f.Chance(0.8);
    a.num_kv_splits = f.Uniform(0, 4);
    const absl::Status s = PagedAttention(a);
    ExpectOkOrInvalid(s);
    tally.Add(s);
    if (!s.ok()) continue;
    const std::vector<double> want = testing::DenseAttentionF64(a, rc);
    double max_v = 1e-30;
    for (int64_t i = 0; i < v.size(); ++i) max_v = std::max(max_v, double{std::fabs(v.Get(i))});
    const double tol = kv_dtype == KvDtype::kFloat32 ? 2e-5 * max_v : 2e-2 * max_v;
    for (int64_t s2 = 0; s2 < num_seqs; ++s2) {
      for (int64_t t = qsl[s2]; t < qsl[s2 + 1]; ++t) {
        for (int64_t e = 0; e < q_heads * dim; ++e) {
          ASSERT_NEAR(out.Get(t * q_heads * dim + e),
                      want[static_cast<size_t>(t * q_heads * dim + e)], tol);
        }
      }
    }
  }
  EXPECT_GT(tally.ok, kIterations / 20);
  EXPECT_GT(tally.invalid, kIterations / 20);
}

TEST(RobustnessTest, Quantization) {
  Fuzz f(4);
  Tally tally;
  for (int it = 0; it < kIterations; ++it) {
    QuantParams p;
    p.scheme = f.Chance(0.7) ? QuantScheme::kAsymmetric : QuantScheme::kSymmetric;
    p.axis = f.Chance(0.5) ? QuantAxis::kPerToken : QuantAxis::kPerChannel;
    const int bits_choice[] = {2, 4, 8, 8, 8, 3, 16};
    p.bits = bits_choice[f.Uniform(0, 6)];
    if (p.scheme == QuantScheme::kSymmetric && f.Chance(0.8)) p.bits = 8;
    p.group_size = f.Chance(0.1) ? f.Uniform(-1, 5) : int64_t{1} << f.Uniform(0, 5);
    // Mostly whole groups and whole words, sometimes anything.
    const int64_t rows = f.Chance(0.7) ? 32 * f.Uniform(1, 2) : f.Dim(1, 64);
    const int64_t cols = f.Chance(0.7) ? 32 * f.Uniform(1, 2) : f.Dim(1, 64);
    const int64_t stride = f.Chance(0.7) ? cols : f.Uniform(-1, 80);
    const KvDtype dtype = f.Dtype();
    const auto reach = Fuzz::Reach({{rows, stride}, {cols, 1}});
    const int64_t extent = f.Extent(reach);
    HostTensor x(IsFloatDtype(dtype) ? dtype : KvDtype::kFloat32, extent);
    x.FillNormal(f.rng(), 2.0f, f.Chance(0.3) ? 5.0f : 0.0f);
    const ConstMatrixView view{x.data(), dtype, rows, cols, stride, extent};
    absl::StatusOr<QuantizedSizes> sizes =
        QuantizedSizesFor(p, std::clamp<int64_t>(rows, -1, 64), std::clamp<int64_t>(cols, -1, 64));
    const int64_t words =
        sizes.ok() ? sizes->code_words + (f.Chance(0.05) ? 1 : 0) : f.Uniform(0, 8);
    const int64_t groups =
        sizes.ok() ? sizes->num_groups - (f.Chance(0.05) ? 1 : 0) : f.Uniform(0, 8);
    std::vector<uint32_t> codes(static_cast<size_t>(std::max<int64_t>(words, 0)));
    std::vector<float> scales(static_cast<size_t>(std::max<int64_t>(groups, 0)));
    std::vector<float> zeros(p.scheme == QuantScheme::kAsymmetric || f.Chance(0.1) ? scales.size()
                                                                                   : 0);
    const absl::Status s = Quantize(p, view, codes, scales, zeros);
    ExpectOkOrInvalid(s);
    tally.Add(s);
    if (!s.ok()) continue;
    HostTensor back(KvDtype::kFloat32, rows * cols);
    ASSERT_TRUE(Dequantize(p, codes, scales, zeros,
                           MatrixView::Dense(back.data(), back.dtype(), rows, cols))
                    .ok());
    const float max_scale = *std::max_element(scales.begin(), scales.end());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_LE(std::fabs(back.Get(r * cols + c) - x.Get(r * stride + c)),
                  max_scale / 2 * 1.001f + 1e-6f);
      }
    }
  }
  EXPECT_GT(tally.ok, kIterations / 20);
  EXPECT_GT(tally.invalid, kIterations / 20);
}

TEST(RobustnessTest, PageSummariesScoresAndSelection) {
  Fuzz f(5);
  Tally tally;
  for (int it = 0; it < kIterations; ++it) {
    const int64_t blocks = f.Dim(1, 6), bs = f.Dim(1, 6), heads = f.Dim(1, 3), dim = f.Dim(1, 10);
    const KvDtype dtype = f.Dtype();
    const PagedKvSpec spec = PagedKvSpec::Contiguous(dtype, 1, blocks, bs, heads, dim);
    const auto reach = Fuzz::Reach(
        {{blocks, spec.block_stride}, {bs, spec.slot_stride}, {heads, spec.head_stride}, {dim, 1}});
    HostTensor k(IsFloatDtype(dtype) ? dtype : KvDtype::kFloat32, f.Extent(reach));
    k.FillNormal(f.rng());
    const int64_t pages = f.Uniform(0, 5);
    std::vector<int32_t> ids(static_cast<size_t>(pages)), ntok(ids.size());
    for (auto& i : ids) i = static_cast<int32_t>(f.Uniform(-1, std::clamp<int64_t>(blocks, 0, 6)));
    for (auto& t : ntok) t = static_cast<int32_t>(f.Uniform(0, std::clamp<int64_t>(bs, 0, 6) + 1));
    const bool sane = blocks > 0 && blocks <= 6 && bs > 0 && bs <= 6 && heads > 0 && heads <= 3 &&
                      dim > 0 && dim <= 10;
    const int64_t summary_size =
        sane ? pages * heads * 2 * dim + (f.Chance(0.05) ? 1 : 0) : f.Uniform(0, 9);
    std::vector<float> summaries(static_cast<size_t>(summary_size));
    RopeConfig rc;
    rc.rotary_dim = 2 * f.Uniform(1, 5);
    rc.max_position = f.Uniform(1, 40);
    const RopeTable table = *RopeTable::Create(rc);
    const bool nope = f.Chance(0.3);
    const absl::Status s =
        BuildPageSummaries({spec, PagedKvLayer::FromSeparatePlanes(k.data(), k.size(), nullptr, 0),
                            ids, ntok, nope ? table.view() : RopeTableView{}, summaries});
    ExpectOkOrInvalid(s);
    tally.Add(s);
    if (s.ok() && !nope) {
      for (int64_t p = 0; p < pages; ++p) {
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t d = 0; d < dim; ++d) {
            float lo = INFINITY;
            for (int64_t t = 0; t < ntok[p]; ++t)
              lo = std::min(lo, k.Get(spec.SlotOffset(ids[p], t) + h * dim + d));
            ASSERT_EQ(summaries[static_cast<size_t>(((p * heads + h) * 2) * dim + d)], lo);
          }
        }
      }
    }
    // Scores over whatever summaries exist (random sizes exercise the checks).
    const int64_t q_heads = f.Chance(0.9) ? SaturatingMul(heads, f.Uniform(1, 2)) : f.Dim(1, 5);
    HostTensor q(KvDtype::kFloat32, std::clamp<int64_t>(SaturatingMul(q_heads, dim), 1, 64));
    q.FillNormal(f.rng());
    std::vector<float> scores(static_cast<size_t>(
        std::clamp<int64_t>(SaturatingMul(heads, pages) + (f.Chance(0.05) ? 1 : 0), 0, 64)));
    std::vector<int64_t> page_pos(static_cast<size_t>(std::max<int64_t>(pages, 0)));
    for (auto& p : page_pos) p = f.Uniform(-50, 50);
    PageScoreArgs a;
    a.q = ConstHeadsView{q.data(), KvDtype::kFloat32,           1,   q_heads,
                         dim,      SaturatingMul(q_heads, dim), dim, q.size()};
    a.summaries = summaries;
    a.num_pages = pages;
    a.num_kv_heads = heads;
    a.combine = f.Chance(0.5) ? GqaCombine::kSum : GqaCombine::kMax;
    if (nope) {
      a.rope = table.view();
      a.query_position = f.Uniform(-1, rc.max_position);
      a.page_positions = page_pos;
    }
    a.scores = scores;
    const absl::Status ss = ScorePages(a);
    ExpectOkOrInvalid(ss);
    tally.Add(ss);
    // Selection over the scores.
    const int64_t budget = f.Uniform(-1, 6);
    std::vector<int32_t> selected(static_cast<size_t>(std::clamp<int64_t>(
        SaturatingMul(heads, std::min(budget, pages)) + (f.Chance(0.05) ? 1 : 0), 0, 64)));
    const absl::Status sel = SelectTopPages(scores, heads, pages, budget, f.Chance(0.5), selected);
    ExpectOkOrInvalid(sel);
    tally.Add(sel);
    if (sel.ok()) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t keep = std::min(budget, pages);
        ASSERT_TRUE(std::is_sorted(selected.begin() + h * keep, selected.begin() + (h + 1) * keep));
        for (int64_t i = 0; i < keep; ++i) {
          ASSERT_GE(selected[h * keep + i], 0);
          ASSERT_LT(selected[h * keep + i], pages);
        }
      }
    }
  }
  EXPECT_GT(tally.ok, kIterations / 10);
  EXPECT_GT(tally.invalid, kIterations / 10);
}

TEST(RobustnessTest, Blend) {
  Fuzz f(6);
  Tally tally;
  for (int it = 0; it < kIterations; ++it) {
    const int64_t rows = f.Dim(1, 40), cols = f.Dim(1, 30);
    const int64_t stride_a = f.Chance(0.7) ? cols : f.Uniform(-1, 40);
    const int64_t stride_b = f.Chance(0.7) ? cols : f.Uniform(-1, 40);
    const KvDtype da = f.Dtype(), db = f.Dtype();
    const int64_t ea = f.Extent(Fuzz::Reach({{rows, stride_a}, {cols, 1}}));
    const int64_t eb =
        f.Extent(Fuzz::Reach({{f.Chance(0.95) ? rows : rows + 1, stride_b}, {cols, 1}}));
    HostTensor a(IsFloatDtype(da) ? da : KvDtype::kFloat32, ea),
        b(IsFloatDtype(db) ? db : KvDtype::kFloat32, eb);
    a.FillNormal(f.rng());
    b.FillNormal(f.rng());
    std::vector<float> dev(
        static_cast<size_t>(std::clamp<int64_t>(rows + (f.Chance(0.05) ? 1 : 0), 0, 64)));
    const absl::Status s = TokenDeviation({a.data(), da, rows, cols, stride_a, ea},
                                          {b.data(), db, rows, cols, stride_b, eb}, dev);
    ExpectOkOrInvalid(s);
    tally.Add(s);
    if (s.ok()) {
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double d = double{a.Get(r * stride_a + c)} - b.Get(r * stride_b + c);
          want += d * d;
        }
        ASSERT_NEAR(dev[r], want, 1e-5 * want + 1e-6);
      }
    }
    const int64_t suffix = f.Uniform(-1, static_cast<int64_t>(dev.size()) + 1);
    const double ratio = f.Chance(0.05) ? 1.5 : f.Uniform(0, 10) / 10.0;
    absl::StatusOr<std::vector<int32_t>> sel = SelectBlendTokens(dev, suffix, ratio);
    ExpectOkOrInvalid(sel.status());
    tally.Add(sel.status());
    if (sel.ok()) {
      const int64_t n = static_cast<int64_t>(dev.size());
      ASSERT_EQ(static_cast<int64_t>(sel->size()),
                static_cast<int64_t>(std::floor(static_cast<double>(n - suffix) * ratio)) + suffix);
      ASSERT_TRUE(std::is_sorted(sel->begin(), sel->end()));
    }
  }
  EXPECT_GT(tally.ok, kIterations / 10);
  EXPECT_GT(tally.invalid, kIterations / 20);
}

}  // namespace
}  // namespace strata::kernels
