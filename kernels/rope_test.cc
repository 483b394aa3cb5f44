#include "kernels/rope.h"

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing/test_util.h"

namespace strata::kernels {
namespace {

using testing::HostTensor;

RopeTable MakeTable(RopeConfig c) {
  absl::StatusOr<RopeTable> t = RopeTable::Create(c);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

RopeConfig Llama31(int64_t max_position, AnglePrecision precision) {
  RopeConfig c;
  c.rotary_dim = 128;
  c.theta = 500000.0;
  c.scaling = RopeScaling::kLlama3;
  c.max_position = max_position;
  c.precision = precision;
  return c;
}

// fp64 reference rotation of every token and head of a dense [T, H, D] fp32/bf16 tensor.
std::vector<double> Reference(const HostTensor& x, int64_t tokens, int64_t heads, int64_t dim,
                              const RopeConfig& c, const std::vector<int64_t>& positions) {
  const std::vector<double> inv = testing::InvFreqF64(c);
  std::vector<double> out(static_cast<size_t>(tokens * heads * dim));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      std::span<double> v(out.data() + (t * heads + h) * dim, static_cast<size_t>(dim));
      for (int64_t d = 0; d < dim; ++d) v[d] = x.Get((t * heads + h) * dim + d);
      testing::RopeF64(v, c, inv, static_cast<double>(positions[static_cast<size_t>(t)]));
    }
  }
  return out;
}

double MaxAbs(const HostTensor& x) {
  double m = 0;
  for (int64_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(x.Get(i))));
  return m;
}

TEST(RopeTableTest, FrequenciesFollowTheFormulas) {
  RopeConfig c;
  c.rotary_dim = 128;
  c.theta = 10000;
  c.max_position = 16;
  const RopeTable fp32 = MakeTable(c);
  c.precision = AnglePrecision::kFp64;
  const RopeTable fp64 = MakeTable(c);
  for (int64_t i = 0; i < 64; ++i) {
    const double want = std::pow(10000.0, -2.0 * i / 128.0);
    EXPECT_NEAR(fp64.inv_freq()[i], want, 1e-15 * want);
    EXPECT_NEAR(fp32.inv_freq()[i], want, 3e-7 * want);  // fp32 pow and reciprocal
    EXPECT_EQ(static_cast<double>(static_cast<float>(fp32.inv_freq()[i])), fp32.inv_freq()[i]);
  }
}

TEST(RopeTableTest, Llama3ScalingBands) {
  const RopeTable t = MakeTable(Llama31(16, AnglePrecision::kFp64));
  const RopeTable t32 = MakeTable(Llama31(16, AnglePrecision::kVllmFp32));
  int unchanged = 0, divided = 0, smoothed = 0;
  for (int64_t i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128.0);
    const double wavelen = 2 * std::numbers::pi / base;
    const double got = t.inv_freq()[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_DOUBLE_EQ(got, base);
      ++unchanged;
    } else if (wavelen > 8192.0) {
      EXPECT_DOUBLE_EQ(got, base / 8);
      ++divided;
    } else {
      const double m = (8192.0 / wavelen - 1) / 3;
      EXPECT_DOUBLE_EQ(got, (1 - m) * base / 8 + m * base);
      EXPECT_GT(got, base / 8);
      EXPECT_LT(got, base);
      ++smoothed;
    }
    EXPECT_NEAR(t32.inv_freq()[i], got, 2e-6 * got) << i;
  }
  EXPECT_GT(unchanged, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(RopeTableTest, TableIsCastToItsDtype) {
  RopeConfig c;
  c.rotary_dim = 64;
  c.max_position = 300;
  const RopeTable fp32 = MakeTable(c);
  c.table_dtype = KvDtype::kBfloat16;
  const RopeTable bf16 = MakeTable(c);
  for (size_t i = 0; i < fp32.cos_sin().size(); ++i) {
    ASSERT_EQ(bf16.cos_sin()[i], RoundToDtype(fp32.cos_sin()[i], KvDtype::kBfloat16));
  }
  // vLLM layout: row p holds cos of the R/2 angles, then their sines (fp32 angle p * omega).
  const int64_t p = 123, i = 5;
  const float angle = static_cast<float>(p) * static_cast<float>(fp32.inv_freq()[i]);
  EXPECT_EQ(fp32.cos_row(p)[i], std::cos(angle));
  EXPECT_EQ(fp32.sin_row(p)[i], std::sin(angle));
  EXPECT_EQ(fp32.cos_sin()[static_cast<size_t>(p * 64 + 32 + i)], std::sin(angle));
}

TEST(RopeTableTest, RejectsBadConfigs) {
  RopeConfig c;
  c.rotary_dim = 7;
  EXPECT_EQ(RopeTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.rotary_dim = 0;
  EXPECT_EQ(RopeTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = RopeConfig{};
  c.theta = 1.0;
  EXPECT_EQ(RopeTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.theta = NAN;
  EXPECT_EQ(RopeTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = RopeConfig{};
  c.max_position = 0;
  EXPECT_EQ(RopeTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c.max_position = int64_t{1} << 40;
  EXPECT_EQ(RopeTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = RopeConfig{};
  c.table_dtype = KvDtype::kInt8;
  EXPECT_EQ(RopeTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
  c = RopeConfig{};
  c.scaling = RopeScaling::kLlama3;
  c.llama3.factor = 0;
  EXPECT_EQ(RopeTable::Create(c).status().code(), absl::StatusCode::kInvalidArgument);
}

struct ApplyCase {
  RopeStyle style;
  RopeScaling scaling;
  int64_t rotary_dim;
  int64_t head_dim;
};

class RopeApplyTest : public ::testing::TestWithParam<ApplyCase> {
 protected:
  RopeConfig Config(int64_t max_position, AnglePrecision precision,
                    KvDtype table_dtype = KvDtype::kFloat32) const {
    RopeConfig c = GetParam().scaling == RopeScaling::kLlama3 ? Llama31(max_position, precision)
                                                              : RopeConfig{};
    c.rotary_dim = GetParam().rotary_dim;
    c.style = GetParam().style;
    c.max_position = max_position;
    c.precision = precision;
    c.table_dtype = table_dtype;
    return c;
  }
};

TEST_P(RopeApplyTest, Fp32MatchesFp64ReferenceBelow32k) {
  const int64_t tokens = 24, heads = 3, dim = GetParam().head_dim;
  const RopeConfig c = Config(32768, AnglePrecision::kFp64);
  const RopeTable table = MakeTable(c);
  std::mt19937_64 rng(1);
  HostTensor x(KvDtype::kFloat32, tokens * heads * dim);
  x.FillNormal(rng);
  std::vector<int64_t> pos(tokens);
  std::uniform_int_distribution<int64_t> any(0, 32767);
  for (auto& p : pos) p = any(rng);
  pos[0] = 0;
  pos[1] = 32767;
  const std::vector<double> want = Reference(x, tokens, heads, dim, c, pos);
  HostTensor y(KvDtype::kFloat32, x.size());
  ASSERT_TRUE(ApplyRope(table, ConstHeadsView::Dense(x.data(), x.dtype(), tokens, heads, dim),
                        HeadsView::Dense(y.data(), y.dtype(), tokens, heads, dim), pos)
                  .ok());
  const auto err = testing::Compare(y.ToFloats(), want);
  EXPECT_LE(err.max_abs_error, 1e-5 * MaxAbs(x));
  // Dims at or above rotary_dim pass through unchanged.
  for (int64_t i = 0; i < tokens * heads; ++i) {
    for (int64_t d = GetParam().rotary_dim; d < dim; ++d) {
      ASSERT_EQ(y.Get(i * dim + d), x.Get(i * dim + d));
    }
  }
  // vLLM's fp32-angle table: the kernel is exact up to the fp32 angle error ~6e-8 * p * omega.
  const RopeTable vllm = MakeTable(Config(32768, AnglePrecision::kVllmFp32));
  ASSERT_TRUE(ApplyRope(vllm, ConstHeadsView::Dense(x.data(), x.dtype(), tokens, heads, dim),
                        HeadsView::Dense(y.data(), y.dtype(), tokens, heads, dim), pos)
                  .ok());
  const auto err32 = testing::Compare(y.ToFloats(), want);
  EXPECT_LE(err32.max_abs_error, (1e-5 + 1.2e-7 * 32768) * MaxAbs(x));
  EXPECT_GT(err32.max_abs_error, err.max_abs_error);  // the fp32 angles really are worse
}

TEST_P(RopeApplyTest, DeltaInverseNormAndRelativeInvariants) {
  const int64_t tokens = 16, heads = 2, dim = GetParam().head_dim;
  const RopeTable table = MakeTable(Config(8192, AnglePrecision::kFp64));
  std::mt19937_64 rng(2);
  HostTensor x(KvDtype::kFloat32, tokens * heads * dim);
  x.FillNormal(rng);
  std::uniform_int_distribution<int64_t> any(0, 4095);
  std::vector<int64_t> p(tokens), d(tokens), sum(tokens), zero(tokens, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    p[t] = any(rng);
    d[t] = any(rng);
    sum[t] = p[t] + d[t];
  }
  auto view = [&](HostTensor& h) {
    return HeadsView::Dense(h.data(), h.dtype(), tokens, heads, dim);
  };
  const double tol = 1e-5 * MaxAbs(x);

  // Delta: R(d) R(p) x == R(p + d) x, both as a second application and as a re-rotation.
  HostTensor a = x, b = x, c = x;
  ASSERT_TRUE(ApplyRope(table, view(a), view(a), p).ok());
  HostTensor rp = a;
  ASSERT_TRUE(ApplyRope(table, view(a), view(a), d).ok());
  ASSERT_TRUE(ApplyRope(table, view(b), view(b), sum).ok());
  ASSERT_TRUE(ReRotateRope(table, view(rp), p, sum).ok());
  for (int64_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(a.Get(i), b.Get(i), tol);
    ASSERT_NEAR(rp.Get(i), b.Get(i), tol);
  }
  // Inverse: R(-p) R(p) x == x.
  ASSERT_TRUE(ApplyRope(table, view(c), view(c), p).ok());
  HostTensor rotated = c;
  ASSERT_TRUE(ReRotateRope(table, view(c), p, zero).ok());
  for (int64_t i = 0; i < x.size(); ++i) ASSERT_NEAR(c.Get(i), x.Get(i), tol);
  // Each pair keeps its norm.
  const int64_t half = GetParam().rotary_dim / 2;
  for (int64_t row = 0; row < tokens * heads; ++row) {
    for (int64_t i = 0; i < half; ++i) {
      const int64_t ia = GetParam().style == RopeStyle::kNeox ? i : 2 * i;
      const int64_t ib = GetParam().style == RopeStyle::kNeox ? i + half : 2 * i + 1;
      const double n0 = std::hypot(x.Get(row * dim + ia), x.Get(row * dim + ib));
      const double n1 = std::hypot(rotated.Get(row * dim + ia), rotated.Get(row * dim + ib));
      ASSERT_NEAR(n0, n1, 1e-6 * std::max(1.0, n0));
    }
  }
  // Relative: <R(p) q, R(p') k> is unchanged when both shift by the same delta.
  HostTensor q(KvDtype::kFloat32, dim), k(KvDtype::kFloat32, dim);
  q.FillNormal(rng);
  k.FillNormal(rng);
  auto dot_at = [&](int64_t pq, int64_t pk) {
    HostTensor qq = q, kk = k;
    auto one = [&](HostTensor& h) { return HeadsView::Dense(h.data(), h.dtype(), 1, 1, dim); };
    EXPECT_TRUE(ApplyRope(table, one(qq), one(qq), std::vector<int64_t>{pq}).ok());
    EXPECT_TRUE(ApplyRope(table, one(kk), one(kk), std::vector<int64_t>{pk}).ok());
    double s = 0;
    for (int64_t i = 0; i < dim; ++i) s += static_cast<double>(qq.Get(i)) * kk.Get(i);
    return s;
  };
  const double base = dot_at(1000, 700);
  for (int64_t delta : {1, 37, 2500, 7000}) {
    EXPECT_NEAR(dot_at(1000 + delta, 700 + delta), base, 1e-4 * dim);
  }
}

TEST_P(RopeApplyTest, Bf16AndFp16WithinTolerance) {
  const int64_t tokens = 20, heads = 4, dim = GetParam().head_dim;
  for (KvDtype dtype : {KvDtype::kBfloat16, KvDtype::kFloat16}) {
    // vLLM's table: fp32 angles, cast to the model dtype.
    const RopeConfig c = Config(4096, AnglePrecision::kVllmFp32, dtype);
    const RopeTable table = MakeTable(c);
    std::mt19937_64 rng(3);
    HostTensor x(dtype, tokens * heads * dim);
    x.FillNormal(rng);
    std::vector<int64_t> pos(tokens);
    for (int64_t t = 0; t < tokens; ++t) pos[t] = t * 200;
    const std::vector<double> want = Reference(x, tokens, heads, dim, c, pos);
    auto v = HeadsView::Dense(x.data(), dtype, tokens, heads, dim);
    ASSERT_TRUE(ApplyRope(table, v, v, pos).ok());
    double rms = 0;
    for (double w : want) rms += w * w;
    rms = std::sqrt(rms / static_cast<double>(want.size()));
    EXPECT_LE(testing::Compare(x.ToFloats(), want).max_abs_error, 3e-2 * rms) << DtypeName(dtype);
  }
}

// GPT-J's interleaved pairs against NeoX's halves: instantiated with the GPT-J cases alone.
class RopeGptjAsNeoxTest : public RopeApplyTest {};

TEST_P(RopeGptjAsNeoxTest, GptjEqualsNeoxOnPermutedPairs) {
  ASSERT_EQ(GetParam().style, RopeStyle::kGptj);
  const int64_t tokens = 6, dim = GetParam().head_dim, rot = GetParam().rotary_dim;
  const RopeTable gptj = MakeTable(Config(1024, AnglePrecision::kVllmFp32));
  RopeConfig nc = Config(1024, AnglePrecision::kVllmFp32);
  nc.style = RopeStyle::kNeox;
  const RopeTable neox = MakeTable(nc);
  std::mt19937_64 rng(4);
  HostTensor x(KvDtype::kFloat32, tokens * dim);
  x.FillNormal(rng);
  HostTensor permuted = x;  // interleaved pairs (2i, 2i+1) moved to (i, i + R/2)
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < rot / 2; ++i) {
      permuted.Set(t * dim + i, x.Get(t * dim + 2 * i));
      permuted.Set(t * dim + i + rot / 2, x.Get(t * dim + 2 * i + 1));
    }
  }
  std::vector<int64_t> pos = {0, 1, 17, 300, 511, 1023};
  auto v = [&](HostTensor& h) { return HeadsView::Dense(h.data(), h.dtype(), tokens, 1, dim); };
  ASSERT_TRUE(ApplyRope(gptj, v(x), v(x), pos).ok());
  ASSERT_TRUE(ApplyRope(neox, v(permuted), v(permuted), pos).ok());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < rot / 2; ++i) {
      ASSERT_EQ(x.Get(t * dim + 2 * i), permuted.Get(t * dim + i));
      ASSERT_EQ(x.Get(t * dim + 2 * i + 1), permuted.Get(t * dim + i + rot / 2));
    }
    for (int64_t d = rot; d < dim; ++d) ASSERT_EQ(x.Get(t * dim + d), permuted.Get(t * dim + d));
  }
}

constexpr ApplyCase kGptjCases[] = {{RopeStyle::kGptj, RopeScaling::kNone, 32, 48},
                                    {RopeStyle::kGptj, RopeScaling::kLlama3, 128, 128}};
constexpr ApplyCase kNeoxCases[] = {{RopeStyle::kNeox, RopeScaling::kNone, 64, 64},
                                    {RopeStyle::kNeox, RopeScaling::kLlama3, 128, 128},
                                    {RopeStyle::kNeox, RopeScaling::kNone, 16, 24}};
INSTANTIATE_TEST_SUITE_P(NeoxStyle, RopeApplyTest, ::testing::ValuesIn(kNeoxCases));
INSTANTIATE_TEST_SUITE_P(GptjStyle, RopeApplyTest, ::testing::ValuesIn(kGptjCases));
INSTANTIATE_TEST_SUITE_P(GptjStyle, RopeGptjAsNeoxTest, ::testing::ValuesIn(kGptjCases));

TEST(RopeTest, ReRotationInBf16MatchesLmcacheSelfTest) {
  // LMCache's validate_reverse_correctness: 10 tokens, positions 0..9 -> 100..109, bf16,
  // max|err| < 0.1 against rotating the original at the new positions.
  RopeConfig c;
  c.rotary_dim = 128;
  c.max_position = 256;
  c.table_dtype = KvDtype::kBfloat16;
  const RopeTable table = MakeTable(c);
  const int64_t tokens = 10, heads = 8, dim = 128;
  std::mt19937_64 rng(9);
  HostTensor x(KvDtype::kBfloat16, tokens * heads * dim);
  x.FillNormal(rng);
  HostTensor direct = x;
  std::vector<int64_t> old_pos(tokens), new_pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    old_pos[t] = t;
    new_pos[t] = 100 + t;
  }
  auto v = [&](HostTensor& h) { return HeadsView::Dense(h.data(), h.dtype(), tokens, heads, dim); };
  ASSERT_TRUE(ApplyRope(table, v(x), v(x), old_pos).ok());
  ASSERT_TRUE(ReRotateRope(table, v(x), old_pos, new_pos).ok());
  ASSERT_TRUE(ApplyRope(table, v(direct), v(direct), new_pos).ok());
  double max_err = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    max_err = std::max(max_err, static_cast<double>(std::fabs(x.Get(i) - direct.Get(i))));
  }
  EXPECT_LT(max_err, 0.1);
}

TEST(RopeTest, StridedOutOfPlaceLeavesPaddingAlone) {
  RopeConfig c;
  c.rotary_dim = 8;
  c.max_position = 64;
  const RopeTable table = MakeTable(c);
  // q of a fused qkv buffer: token stride 40, 2 heads of head_dim 8 with head stride 12.
  const int64_t tokens = 3, heads = 2, dim = 8, tstride = 40, hstride = 12;
  const int64_t extent = (tokens - 1) * tstride + (heads - 1) * hstride + dim;
  std::vector<float> in(static_cast<size_t>(extent)), out(static_cast<size_t>(extent), -5.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 7) - 3.0f;
  const ConstHeadsView iv{in.data(), KvDtype::kFloat32, tokens,  heads,
                          dim,       tstride,           hstride, extent};
  const HeadsView ov{out.data(), KvDtype::kFloat32, tokens, heads, dim, tstride, hstride, extent};
  std::vector<int64_t> pos = {5, 0, 63};
  ASSERT_TRUE(ApplyRope(table, iv, ov, pos).ok());
  std::vector<bool> covered(static_cast<size_t>(extent), false);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> want(static_cast<size_t>(dim));
      for (int64_t d = 0; d < dim; ++d) {
        want[d] = in[static_cast<size_t>(t * tstride + h * hstride + d)];
        covered[static_cast<size_t>(t * tstride + h * hstride + d)] = true;
      }
      testing::RopeF64(want, c, testing::InvFreqF64(c), static_cast<double>(pos[t]));
      for (int64_t d = 0; d < dim; ++d) {
        EXPECT_NEAR(out[static_cast<size_t>(t * tstride + h * hstride + d)], want[d], 1e-5);
      }
    }
  }
  for (int64_t i = 0; i < extent; ++i) {
    if (!covered[static_cast<size_t>(i)]) {
      EXPECT_EQ(out[static_cast<size_t>(i)], -5.0f);
    }
  }
}

TEST(RopeTest, RejectsBadArguments) {
  RopeConfig c;
  c.rotary_dim = 16;
  c.max_position = 32;
  const RopeTable table = MakeTable(c);
  std::vector<float> buf(4 * 2 * 16);
  const HeadsView v = HeadsView::Dense(buf.data(), KvDtype::kFloat32, 4, 2, 16);
  std::vector<int64_t> pos = {0, 1, 2, 31};
  EXPECT_TRUE(ApplyRope(table, v, v, pos).ok());
  const auto code = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(ApplyRope(table, v, v, std::vector<int64_t>{0, 1, 2, 32}).code(), code);
  EXPECT_EQ(ApplyRope(table, v, v, std::vector<int64_t>{0, -1, 2, 3}).code(), code);
  EXPECT_EQ(ApplyRope(table, v, v, std::vector<int64_t>{0, 1, 2}).code(), code);
  HeadsView narrow = HeadsView::Dense(buf.data(), KvDtype::kFloat32, 4, 2, 8);
  EXPECT_EQ(ApplyRope(table, narrow, narrow, pos).code(), code);  // rotary_dim > head_dim
  HeadsView big = v;
  big.extent_elems -= 1;
  EXPECT_EQ(ApplyRope(table, big, big, pos).code(), code);
  HeadsView null = v;
  null.data = nullptr;
  EXPECT_EQ(ApplyRope(table, null, null, pos).code(), code);
  HeadsView shifted = v;
  shifted.data = buf.data() + 1;
  shifted.extent_elems -= 1;
  shifted.num_tokens = 3;
  HeadsView first3 = v;
  first3.num_tokens = 3;
  EXPECT_EQ(ApplyRope(table, first3, shifted, std::vector<int64_t>{0, 1, 2}).code(), code);
  HeadsView overlapping = v;
  overlapping.head_stride = 8;  // heads overlap: writes would collide
  overlapping.token_stride = 16;
  EXPECT_EQ(ApplyRope(table, overlapping, overlapping, pos).code(), code);
  HeadsView bf = v;
  bf.dtype = KvDtype::kBfloat16;
  EXPECT_EQ(ApplyRope(table, v, bf, pos).code(), code);
  bf.dtype = KvDtype::kFp8E4m3;
  EXPECT_EQ(ApplyRope(table, bf, bf, pos).code(), code);
  EXPECT_EQ(ReRotateRope(table, v, pos, std::vector<int64_t>{0, 1, 2, 99}).code(), code);
  for (float f : buf) EXPECT_EQ(f, 0.0f);  // nothing written by a rejected call
}

}  // namespace
}  // namespace strata::kernels
