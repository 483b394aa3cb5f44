#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing/test_util.h"

namespace strata::kernels {
namespace {

using testing::HostTensor;

using Problem = testing::AttentionProblem;
using Shape = testing::AttentionShape;

Problem MakeProblem(const Shape& s, std::vector<std::pair<int32_t, int32_t>> seqs, uint64_t seed,
                    KvDtype kv_dtype = KvDtype::kFloat32) {
  return testing::MakeAttentionProblem(s, seqs, seed, kv_dtype);
}

// Runs the CPU kernel; fails the test when it does not succeed.
HostTensor RunCpu(const Problem& p) {
  HostTensor out;
  const absl::Status s = p.Run(out);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

void ExpectClose(const HostTensor& out, const std::vector<double>& want, double atol, double rtol) {
  ASSERT_EQ(static_cast<size_t>(out.size()), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LE(std::fabs(out.Get(static_cast<int64_t>(i)) - want[i]),
              atol + rtol * std::fabs(want[i]))
        << "element " << i << " got " << out.Get(static_cast<int64_t>(i)) << " want " << want[i];
  }
}

bool BitIdentical(const HostTensor& a, const HostTensor& b) {
  return a.size_bytes() == b.size_bytes() &&
         std::memcmp(a.data(), b.data(), static_cast<size_t>(a.size_bytes())) == 0;
}

class PagedAttentionTest : public ::testing::TestWithParam<Shape> {};

TEST_P(PagedAttentionTest, PrefillMatchesDenseFp64Reference) {
  // An append (context 9, 6 new tokens), a full prefill, and a decode token, in one batch.
  Problem p = MakeProblem(GetParam(), {{15, 6}, {11, 11}, {23, 1}}, 1);
  for (int64_t splits : {1, 3}) {
    p.splits = splits;
    ExpectClose(RunCpu(p), p.Reference(), 1e-5, 1e-5);
  }
  p.causal = false;
  ExpectClose(RunCpu(p), p.Reference(), 1e-5, 1e-5);
}

TEST_P(PagedAttentionTest, DecodeWithSplitsMatchesReference) {
  Problem p = MakeProblem(GetParam(), {{37, 1}, {5, 1}, {64, 1}, {1, 1}}, 2);
  HostTensor one_split = RunCpu(p);
  ExpectClose(one_split, p.Reference(), 1e-5, 1e-5);
  for (int64_t splits : {2, 4, 16}) {
    p.splits = splits;
    HostTensor out = RunCpu(p);
    ExpectClose(out, p.Reference(), 1e-5, 1e-5);
  }
}

TEST_P(PagedAttentionTest, Bf16StorageWithinTolerance) {
  Problem p = MakeProblem(GetParam(), {{29, 7}, {40, 1}}, 3, KvDtype::kBfloat16);
  double max_v = 0;
  for (int64_t i = 0; i < p.v.size(); ++i) {
    if (!std::isnan(p.v.Get(i))) max_v = std::max(max_v, std::fabs(double{p.v.Get(i)}));
  }
  // The table cast to bf16 as vLLM does; the fp64 reference keeps exact angles.
  p.rope_config.table_dtype = KvDtype::kBfloat16;
  p.rope = *RopeTable::Create(p.rope_config);
  p.splits = 2;
  ExpectClose(RunCpu(p), p.Reference(), 2e-2 * max_v, 0);
}

TEST_P(PagedAttentionTest, PermutingPhysicalBlocksIsBitIdentical) {
  Problem p = MakeProblem(GetParam(), {{26, 4}, {17, 1}}, 4);
  const HostTensor before = RunCpu(p);
  // Move every block to a new physical id and update the table.
  std::vector<int32_t> perm(static_cast<size_t>(p.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 rng(44);
  std::shuffle(perm.begin(), perm.end(), rng);
  Problem q = p;
  const int64_t block_elems = p.block_size * p.kv_heads * p.dim;
  for (int64_t b = 0; b < p.num_blocks; ++b) {
    for (int64_t e = 0; e < block_elems; ++e) {
      q.k.Set(perm[b] * block_elems + e, p.k.Get(b * block_elems + e));
      q.v.Set(perm[b] * block_elems + e, p.v.Get(b * block_elems + e));
    }
  }
  for (int32_t& b : q.block_table) {
    if (b >= 0) b = perm[b];
  }
  EXPECT_TRUE(BitIdentical(before, RunCpu(q)));
}

TEST_P(PagedAttentionTest, SharedBlockAtDifferentOffsets) {
  // Sequence 0 maps physical block X at logical index 1, sequence 1 at logical index 3 (a MEPIC
  // canonical page shared by two requests): each must equal its own dense reference.
  Problem p =
      MakeProblem(GetParam(), {{3 * GetParam().block_size, 2}, {5 * GetParam().block_size, 1}}, 5);
  const int32_t shared = p.block_table[0 * p.max_blocks + 1];
  p.block_table[1 * p.max_blocks + 3] = shared;
  ExpectClose(RunCpu(p), p.Reference(), 1e-5, 1e-5);
}

// MEPIC's block table over two caches: some of a sequence's blocks are the engine's, others the
// daemon's pool pages (another allocation, other strides), read in place. The output is the
// same bits as with every block in the engine's cache, and matches the dense reference.
TEST_P(PagedAttentionTest, BlocksOfASecondCacheAreReadInPlace) {
  const int64_t b = GetParam().block_size;
  Problem p = MakeProblem(GetParam(), {{4 * static_cast<int32_t>(b), 3}, {21, 1}}, 9);
  p.splits = 2;
  const HostTensor one_cache = RunCpu(p);
  p.MoveToSharedCache({{0, 1}, {0, 2}, {1, 0}});
  EXPECT_TRUE(BitIdentical(one_cache, RunCpu(p)));
  ExpectClose(RunCpu(p), p.Reference(), 1e-5, 1e-5);

  HostTensor out(KvDtype::kFloat32, p.num_tokens() * p.q_heads * p.dim);
  PagedAttentionArgs a = p.Args(out);
  std::vector<int32_t> past_both = p.block_table;
  past_both[0] = static_cast<int32_t>(p.num_blocks + p.shared_blocks);
  a.block_table = past_both;
  EXPECT_EQ(PagedAttention(a).code(), absl::StatusCode::kInvalidArgument) << "past both caches";
  a = p.Args(out);
  a.shared_spec.block_size = b * 2;
  EXPECT_EQ(PagedAttention(a).code(), absl::StatusCode::kInvalidArgument) << "another block size";
  a = p.Args(out);
  a.shared_kv.planes[1] = nullptr;
  EXPECT_EQ(PagedAttention(a).code(), absl::StatusCode::kInvalidArgument) << "no V plane";
  a = p.Args(out);
  a.shared_kv.extent_elems[0] = 1;
  EXPECT_EQ(PagedAttention(a).code(), absl::StatusCode::kInvalidArgument) << "a short plane";
}

TEST_P(PagedAttentionTest, ShiftingAllPositionsLeavesOutputUnchanged) {
  Problem p = MakeProblem(GetParam(), {{21, 5}, {30, 1}}, 6);
  // Explicit per-block positions (default j * B), then the same shifted by delta.
  p.block_positions.assign(p.block_table.size(), 0);
  for (size_t s = 0; s < p.seq_lens.size(); ++s) {
    for (int64_t j = 0; j < p.max_blocks; ++j)
      p.block_positions[s * p.max_blocks + j] = j * p.block_size;
  }
  const HostTensor base = RunCpu(p);
  ExpectClose(base, p.Reference(), 1e-5, 1e-5);
  for (int64_t delta : {1, 777, 3000}) {
    Problem shifted = p;
    for (auto& x : shifted.block_positions) x += delta;
    for (auto& x : shifted.query_positions) x += delta;
    const HostTensor out = RunCpu(shifted);
    for (int64_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out.Get(i), base.Get(i), 2e-5);
  }
  // A position change that is not a uniform shift does change the output: RoPE really is applied.
  Problem moved = p;
  moved.query_positions[0] += 3;
  const HostTensor out = RunCpu(moved);
  double diff = 0;
  for (int64_t i = 0; i < out.size(); ++i)
    diff = std::max(diff, double{std::fabs(out.Get(i) - base.Get(i))});
  EXPECT_GT(diff, 1e-3);
}

TEST_P(PagedAttentionTest, EqualsPreRotatedKThenStandardPagedAttention) {
  Problem p = MakeProblem(GetParam(), {{19, 3}, {33, 1}}, 7);
  const HostTensor fused = RunCpu(p);
  // Rotate every used key in the cache at its position, and q at its position; then run without
  // RoPE.
  Problem pre = p;
  for (size_t s = 0; s < p.seq_lens.size(); ++s) {
    for (int64_t i = 0; i < p.seq_lens[s]; ++i) {
      const int64_t block = p.block_table[s * p.max_blocks + i / p.block_size];
      const int64_t slot = i % p.block_size;
      float* key =
          static_cast<float*>(pre.k.data()) + (block * p.block_size + slot) * p.kv_heads * p.dim;
      auto view = HeadsView::Dense(key, KvDtype::kFloat32, 1, p.kv_heads, p.dim);
      ASSERT_TRUE(ApplyRope(*p.rope, view, view, std::vector<int64_t>{i}).ok());
    }
  }
  auto qv = HeadsView::Dense(pre.q.data(), KvDtype::kFloat32, p.num_tokens(), p.q_heads, p.dim);
  ASSERT_TRUE(ApplyRope(*p.rope, qv, qv, p.query_positions).ok());
  pre.rope.reset();
  const HostTensor standard = RunCpu(pre);
  for (int64_t i = 0; i < fused.size(); ++i) ASSERT_NEAR(fused.Get(i), standard.Get(i), 1e-6);
}

TEST_P(PagedAttentionTest, NanInUnusedSlotsDoesNotLeak) {
  Problem p = MakeProblem(GetParam(), {{13, 4}, {9, 1}}, 8);  // tails already NaN
  const HostTensor with_nan = RunCpu(p);
  for (int64_t i = 0; i < with_nan.size(); ++i) ASSERT_FALSE(std::isnan(with_nan.Get(i)));
  Problem zeros = p;
  for (int64_t i = 0; i < zeros.k.size(); ++i) {
    if (std::isnan(zeros.k.Get(i))) zeros.k.Set(i, 0);
    if (std::isnan(zeros.v.Get(i))) zeros.v.Set(i, 0);
  }
  EXPECT_TRUE(BitIdentical(with_nan, RunCpu(zeros)));
}

// MEPIC's pads: a chunk's leading pads and a segment's trailing pads are masked keys. No query
// sees them (their K and V may hold anything), they keep their slots' positions, and a query
// whose every visible key is masked gets zeros.
TEST_P(PagedAttentionTest, MaskedKeysAreSeenByNoQuery) {
  const int64_t b = GetParam().block_size;
  Problem p = MakeProblem(GetParam(),
                          {{static_cast<int32_t>(3 * b), static_cast<int32_t>(b)},
                           {static_cast<int32_t>(2 * b + 1), 2}},
                          11);
  const int64_t row = p.max_blocks * b;
  p.masked_keys.assign(p.seq_lens.size() * static_cast<size_t>(row), 0);
  for (int64_t t = 0; t < b / 2 + 1; ++t) p.masked_keys[static_cast<size_t>(t)] = 1;  // leading
  p.masked_keys[static_cast<size_t>(2 * b - 1)] = 1;  // a trailing pad before block 2
  p.masked_keys[static_cast<size_t>(row + b)] = 1;
  p.splits = 2;
  const HostTensor masked = RunCpu(p);
  ExpectClose(masked, p.Reference(), 1e-5, 1e-5);
  const HostTensor unmasked = [&] {
    Problem plain = p;
    plain.masked_keys.clear();
    return RunCpu(plain);
  }();
  EXPECT_FALSE(BitIdentical(masked, unmasked)) << "the mask changed nothing";

  Problem moved = p;  // whatever masked keys hold, the output is the same bits
  for (size_t s = 0; s < moved.seq_lens.size(); ++s) {
    for (int64_t i = 0; i < moved.seq_lens[s]; ++i) {
      if (moved.masked_keys[s * static_cast<size_t>(row) + static_cast<size_t>(i)] == 0) continue;
      const int64_t block =
          moved.block_table[s * static_cast<size_t>(moved.max_blocks) + static_cast<size_t>(i / b)];
      for (int64_t e = 0; e < moved.kv_heads * moved.dim; ++e) {
        const int64_t off = (block * b + i % b) * moved.kv_heads * moved.dim + e;
        moved.k.Set(off, 1e4f);
        moved.v.Set(off, -1e4f);
      }
    }
  }
  EXPECT_TRUE(BitIdentical(masked, RunCpu(moved)));

  Problem all = p;  // sequence 1's first query sees only keys that are all masked
  all.masked_keys.assign(all.masked_keys.size(), 1);
  const HostTensor zeros = RunCpu(all);
  for (int64_t i = 0; i < zeros.size(); ++i) ASSERT_EQ(zeros.Get(i), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PagedAttentionTest,
                         ::testing::Values(Shape{4, 2, 1, 32, RopeStyle::kNeox},
                                           Shape{16, 2, 4, 64, RopeStyle::kNeox},
                                           Shape{8, 1, 3, 16, RopeStyle::kGptj},
                                           Shape{5, 3, 2, 24, RopeStyle::kNeox}));

TEST(PagedAttentionValidationTest, RejectsBadArguments) {
  const Problem good = MakeProblem({4, 2, 2, 16, RopeStyle::kNeox}, {{10, 3}, {6, 1}}, 9);
  HostTensor scratch;
  ASSERT_TRUE(good.Run(scratch).ok());
  const auto invalid = [&](const Problem& p) {
    HostTensor out;
    return p.Run(out).code() == absl::StatusCode::kInvalidArgument;
  };
  Problem p = good;
  p.block_table[1] = static_cast<int32_t>(p.num_blocks);
  EXPECT_TRUE(invalid(p));
  p = good;
  p.block_table[0] = -1;
  EXPECT_TRUE(invalid(p));
  p = good;
  p.seq_lens[0] = static_cast<int32_t>(p.max_blocks * p.block_size + 1);
  EXPECT_TRUE(invalid(p));
  p = good;
  p.seq_lens[0] = 2;  // fewer keys than its 3 queries
  EXPECT_TRUE(invalid(p));
  p = good;
  p.query_positions[2] = 4096;
  EXPECT_TRUE(invalid(p));
  p = good;
  p.block_positions.assign(p.block_table.size(), 4094);  // keys run past the table
  EXPECT_TRUE(invalid(p));
  p = good;
  p.masked_keys.assign(p.block_table.size() * static_cast<size_t>(p.block_size) - 1, 0);
  EXPECT_TRUE(invalid(p)) << "a mask one key short";
  p = good;
  p.query_start_loc[1] = 5;  // decreasing
  EXPECT_TRUE(invalid(p));
  p = good;
  p.query_positions.pop_back();
  EXPECT_TRUE(invalid(p));
  p = good;
  p.splits = 0;
  EXPECT_TRUE(invalid(p));
  p = good;
  p.block_table.pop_back();
  EXPECT_TRUE(invalid(p));
  p = good;
  p.q_heads = 3;  // not a multiple of 2 KV heads
  p.q = HostTensor(KvDtype::kFloat32, p.num_tokens() * 3 * p.dim);
  EXPECT_TRUE(invalid(p));
  p = good;
  p.kv_dtype = KvDtype::kInt8;
  EXPECT_TRUE(invalid(p));
  p = good;
  HostTensor out2(KvDtype::kFloat32, good.num_tokens() * good.q_heads * good.dim);
  PagedAttentionArgs hinted = good.Args(out2);
  hinted.max_query_len = 2;  // sequence 0 has 3 queries
  EXPECT_EQ(PagedAttention(hinted).code(), absl::StatusCode::kInvalidArgument);
  hinted.max_query_len = 3;
  EXPECT_TRUE(PagedAttention(hinted).ok());
  // A short K extent.
  HostTensor out(KvDtype::kFloat32, good.num_tokens() * good.q_heads * good.dim);
  PagedAttentionArgs a = good.Args(out);
  a.kv.extent_elems[0] -= 1;
  EXPECT_EQ(PagedAttention(a).code(), absl::StatusCode::kInvalidArgument);
  a = good.Args(out);
  a.scale = NAN;
  EXPECT_EQ(PagedAttention(a).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kernels
