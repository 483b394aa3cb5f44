#include "kernels/quant.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/testing/test_util.h"

namespace strata::kernels {
namespace {

using testing::HostTensor;

struct QuantCase {
  QuantScheme scheme;
  QuantAxis axis;
  int bits;
  KvDtype dtype;
  bool fp16_params = false;
};

class QuantTest : public ::testing::TestWithParam<QuantCase> {
 protected:
  QuantParams Params() const {
    return {GetParam().scheme, GetParam().axis, GetParam().bits, 32, GetParam().fp16_params};
  }
};

// Runs quantize -> dequantize on x and checks the per-element bound |x - x^| <= scale/2 (1 + 1e-3)
// and that codes / scales match the definition. Returns the relative Frobenius error.
double RoundTrip(const QuantParams& params, const HostTensor& x, int64_t rows, int64_t cols) {
  absl::StatusOr<QuantizedSizes> sizes = QuantizedSizesFor(params, rows, cols);
  EXPECT_TRUE(sizes.ok()) << sizes.status();
  std::vector<uint32_t> codes(static_cast<size_t>(sizes->code_words));
  std::vector<float> scales(static_cast<size_t>(sizes->num_groups));
  std::vector<float> zeros(params.scheme == QuantScheme::kAsymmetric ? scales.size() : 0);
  const ConstMatrixView in = ConstMatrixView::Dense(x.data(), x.dtype(), rows, cols);
  EXPECT_TRUE(Quantize(params, in, codes, scales, zeros).ok());
  HostTensor back(KvDtype::kFloat32, rows * cols);
  EXPECT_TRUE(Dequantize(params, codes, scales, zeros,
                         MatrixView::Dense(back.data(), back.dtype(), rows, cols))
                  .ok());
  const int per_word = 32 / params.bits;
  double err2 = 0, norm2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t g = params.axis == QuantAxis::kPerToken
                            ? r * (cols / params.group_size) + c / params.group_size
                            : (r / params.group_size) * cols + c;
      // The group's own statistics, recomputed here.
      float lo = INFINITY, hi = -INFINITY, amax = 0;
      for (int64_t k = 0; k < params.group_size; ++k) {
        const int64_t rr = params.axis == QuantAxis::kPerToken
                               ? r
                               : (r / params.group_size) * params.group_size + k;
        const int64_t cc = params.axis == QuantAxis::kPerToken
                               ? (c / params.group_size) * params.group_size + k
                               : c;
        const float v = x.Get(rr * cols + cc);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        amax = std::max(amax, std::fabs(v));
      }
      const float scale = scales[static_cast<size_t>(g)];
      const float levels = static_cast<float>((1 << params.bits) - 1);
      if (params.fp16_params) {
        // Both fp16 values: the zero the nearest at or below min, the scale the nearest at or
        // above (max - zero) / levels (fp16 spacing is at most 2^-10 of a value, or 2^-24).
        const float zero = zeros[static_cast<size_t>(g)];
        for (const float v : {zero, scale}) EXPECT_EQ(Fp16BitsToFloat(FloatToFp16Bits(v)), v);
        EXPECT_LE(zero, lo);
        EXPECT_LT(lo - zero, std::ldexp(std::fabs(lo), -10) + std::ldexp(1.0f, -24));
        const float wanted = (hi - zero) / levels;
        EXPECT_GE(scale, wanted);
        EXPECT_LT(scale - wanted, std::ldexp(wanted, -10) + std::ldexp(1.0f, -24));
        lo = zero;
      } else if (params.scheme == QuantScheme::kAsymmetric) {
        EXPECT_EQ(scale, (hi - lo) / levels);
        EXPECT_EQ(zeros[static_cast<size_t>(g)], lo);
      } else {
        EXPECT_EQ(scale, amax / 127.0f);
      }
      const float orig = x.Get(r * cols + c);
      const float rec = back.Get(r * cols + c);
      EXPECT_LE(std::fabs(orig - rec), scale / 2 * (1 + 1e-3) + 1e-30)
          << "r " << r << " c " << c << " scale " << scale;
      const uint32_t word = codes[static_cast<size_t>((r * cols + c) / per_word)];
      const uint32_t code =
          (word >> (((r * cols + c) % per_word) * params.bits)) & ((1u << params.bits) - 1u);
      if (params.scheme == QuantScheme::kAsymmetric && scale > 0) {
        EXPECT_EQ(code,
                  static_cast<uint32_t>(std::clamp(std::rint((orig - lo) / scale), 0.0f, levels)));
      }
      err2 += (orig - rec) * double{orig - rec};
      norm2 += double{orig} * orig;
    }
  }
  return std::sqrt(err2 / norm2);
}

TEST_P(QuantTest, ErrorBoundsAndDefinition) {
  const int64_t rows = 64, cols = 96;
  std::mt19937_64 rng(1);
  HostTensor x(GetParam().dtype, rows * cols);
  x.FillNormal(rng);
  const double rel = RoundTrip(Params(), x, rows, cols);
  // Relative Frobenius error on N(0,1) data, group 32 (ALGORITHMS.md 5a: int8 ~0.46 %, int4 ~7.8 %,
  // int2 ~39 %); symmetric int8 is a bit coarser than asymmetric.
  const double expected = GetParam().bits == 8 ? 0.0046 : GetParam().bits == 4 ? 0.078 : 0.39;
  const double factor = GetParam().scheme == QuantScheme::kSymmetric ? 2.5 : 1.5;
  EXPECT_LT(rel, expected * factor);
  EXPECT_GT(rel, expected / 3);
  // Offset data (all positive, away from zero) and constant groups.
  HostTensor shifted(GetParam().dtype, rows * cols);
  for (int64_t i = 0; i < shifted.size(); ++i) shifted.Set(i, 20.0f + x.Get(i));
  RoundTrip(Params(), shifted, rows, cols);
  HostTensor constant(GetParam().dtype, rows * cols);
  constant.Fill(-3.25f);
  EXPECT_EQ(RoundTrip(Params(), constant, rows, cols), 0.0);
}

TEST_P(QuantTest, StridedInputAndBf16Output) {
  const int64_t rows = 32, cols = 64, stride = 80;
  std::mt19937_64 rng(2);
  HostTensor x(GetParam().dtype, rows * stride);
  x.FillNormal(rng);
  const QuantParams params = Params();
  const auto sizes = *QuantizedSizesFor(params, rows, cols);
  std::vector<uint32_t> codes(static_cast<size_t>(sizes.code_words));
  std::vector<float> scales(static_cast<size_t>(sizes.num_groups)), zeros(scales.size());
  ASSERT_TRUE(Quantize(params, ConstMatrixView{x.data(), x.dtype(), rows, cols, stride, x.size()},
                       codes, scales, zeros)
                  .ok());
  HostTensor out(KvDtype::kBfloat16, rows * stride);
  out.Fill(99.0f);
  ASSERT_TRUE(Dequantize(params, codes, scales, zeros,
                         MatrixView{out.data(), out.dtype(), rows, cols, stride, out.size()})
                  .ok());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < stride; ++c) {
      if (c >= cols) {
        ASSERT_EQ(out.Get(r * stride + c), 99.0f);  // padding untouched
        continue;
      }
      const float max_scale = *std::max_element(scales.begin(), scales.end());
      ASSERT_LE(std::fabs(out.Get(r * stride + c) - x.Get(r * stride + c)),
                max_scale / 2 * 1.001f + std::fabs(x.Get(r * stride + c)) * 0.008f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, QuantTest,
    ::testing::Values(
        QuantCase{QuantScheme::kAsymmetric, QuantAxis::kPerChannel, 8, KvDtype::kFloat32},
        QuantCase{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 8, KvDtype::kBfloat16},
        QuantCase{QuantScheme::kAsymmetric, QuantAxis::kPerChannel, 4, KvDtype::kFloat16},
        QuantCase{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 4, KvDtype::kFloat32},
        QuantCase{QuantScheme::kAsymmetric, QuantAxis::kPerChannel, 2, KvDtype::kFloat32},
        QuantCase{QuantScheme::kSymmetric, QuantAxis::kPerToken, 8, KvDtype::kFloat32},
        QuantCase{QuantScheme::kSymmetric, QuantAxis::kPerChannel, 8, KvDtype::kBfloat16},
        QuantCase{QuantScheme::kAsymmetric, QuantAxis::kPerChannel, 8, KvDtype::kFloat32, true},
        QuantCase{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 8, KvDtype::kBfloat16, true},
        QuantCase{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 4, KvDtype::kFloat16, true}));

TEST(QuantFp16ParamsTest, GroupsBeyondFp16AreOutOfRangeAndSymmetricIsRefused) {
  const int64_t rows = 32, cols = 32;
  HostTensor x(KvDtype::kFloat32, rows * cols);
  x.Fill(1.0f);
  x.Set(5, 70000.0f);  // beyond fp16's 65504
  QuantParams params{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 8, 32, true};
  std::vector<uint32_t> codes(static_cast<size_t>(rows * cols / 4));
  std::vector<float> scales(static_cast<size_t>(rows)), zeros(scales.size(), 7.0f);
  const ConstMatrixView in = ConstMatrixView::Dense(x.data(), x.dtype(), rows, cols);
  EXPECT_EQ(Quantize(params, in, codes, scales, zeros).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(zeros[0], 7.0f);  // nothing written
  x.Set(5, -65504.0f);        // fp16's least value: in range, and its zero
  ASSERT_TRUE(Quantize(params, in, codes, scales, zeros).ok());
  EXPECT_EQ(zeros[0], -65504.0f);
  params.scheme = QuantScheme::kSymmetric;
  EXPECT_EQ(Quantize(params, in, codes, scales, {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(QuantPackTest, PackUnpackRoundTripsBitExactly) {
  std::mt19937_64 rng(3);
  for (int bits : {1, 2, 4, 8, 16}) {
    const size_t n = 32 * 7;
    std::vector<uint16_t> codes(n);
    std::uniform_int_distribution<uint32_t> dist(0, bits == 16 ? 0xffffu : (1u << bits) - 1u);
    for (auto& c : codes) c = static_cast<uint16_t>(dist(rng));
    std::vector<uint32_t> packed(n * bits / 32);
    ASSERT_TRUE(PackCodes(bits, codes, packed).ok());
    // LSB first: the first code sits in the low bits of word 0.
    EXPECT_EQ(packed[0] & (bits == 16 ? 0xffffu : (1u << bits) - 1u), codes[0]);
    std::vector<uint16_t> back(n);
    ASSERT_TRUE(UnpackCodes(bits, packed, back).ok());
    EXPECT_EQ(back, codes) << bits;
  }
  std::vector<uint16_t> codes(8, 3);
  std::vector<uint32_t> one(1);
  ASSERT_TRUE(PackCodes(4, codes, one).ok());
  EXPECT_EQ(one[0], 0x33333333u);
  codes[2] = 16;  // does not fit in 4 bits
  EXPECT_EQ(PackCodes(4, codes, one).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PackCodes(3, codes, one).code(), absl::StatusCode::kInvalidArgument);
  std::vector<uint32_t> two(2);
  EXPECT_EQ(UnpackCodes(4, two, codes).code(), absl::StatusCode::kInvalidArgument);
}

// What the path tests feed both CPU paths: zeros of both signs, subnormals, values at and past
// fp16's range, infinities and NaNs; and every scheme, axis and bit width.
// NaNs with payloads whose rounding to bf16 would carry (0x7fffffff to -0, 0xffc0ffff to another
// NaN), so a path that converts a NaN as a number fails.
const float kSpecials[] = {0.0f,
                           -0.0f,
                           1e-40f,
                           -3e-39f,
                           6e-8f,
                           65504.0f,
                           65520.0f,
                           3e38f,
                           INFINITY,
                           -INFINITY,
                           NAN,
                           -NAN,
                           std::bit_cast<float>(0x7fffffffu),
                           std::bit_cast<float>(0xffc0ffffu)};
const QuantCase kPathCases[] = {{QuantScheme::kAsymmetric, QuantAxis::kPerChannel, 8, {}},
                                {QuantScheme::kAsymmetric, QuantAxis::kPerToken, 8, {}},
                                {QuantScheme::kAsymmetric, QuantAxis::kPerChannel, 4, {}},
                                {QuantScheme::kAsymmetric, QuantAxis::kPerToken, 4, {}},
                                {QuantScheme::kAsymmetric, QuantAxis::kPerChannel, 2, {}},
                                {QuantScheme::kAsymmetric, QuantAxis::kPerToken, 2, {}},
                                {QuantScheme::kSymmetric, QuantAxis::kPerToken, 8, {}},
                                {QuantScheme::kSymmetric, QuantAxis::kPerChannel, 8, {}}};

// The SIMD paths this CPU (and build) has.
std::vector<internal::DequantizePath> SimdPaths() {
  std::vector<internal::DequantizePath> paths;
  for (const auto path : {internal::DequantizePath::kAvx2, internal::DequantizePath::kAvx512}) {
    if (internal::DequantizePathAvailable(path)) paths.push_back(path);
  }
  return paths;
}

TEST(QuantPathTest, EveryCpuPathDequantizesBitForBitAsTheBaseline) {
  using internal::DequantizePath;
  const std::vector<DequantizePath> paths = SimdPaths();
  if (paths.empty()) {
    GTEST_SKIP() << "this CPU (or build) has no SIMD path to compare with the baseline";
  }
  // Random codes, and scales and zeros that include zeros, subnormals, huge values, infinities
  // and NaNs, so that every rounding and special case of the output conversions is reached.
  std::mt19937_64 rng(5);
  auto random_float = [&] {
    if (rng() % 8 == 0) return kSpecials[rng() % std::size(kSpecials)];
    return std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                      static_cast<int>(rng() % 60) - 40);
  };
  // Shapes of whole sixteen-element blocks; ones whose groups (20 channels) and rows (36 of them,
  // 8-bit codes only) leave elements over for the SIMD paths' scalar tails; and groups of 2-bit
  // (18 channels) and 4-bit (17) codes that start inside a byte, which the SIMD paths write with
  // their scalar loop.
  struct Shape {
    int64_t rows, cols, group_size;
  };
  for (const Shape shape : {Shape{64, 96, 32}, Shape{60, 80, 20}, Shape{24, 36, 12},
                            Shape{36, 144, 18}, Shape{34, 136, 17}}) {
    for (const QuantCase& c : kPathCases) {
      const QuantParams params{c.scheme, c.axis, c.bits, shape.group_size};
      const absl::StatusOr<QuantizedSizes> sizes =
          QuantizedSizesFor(params, shape.rows, shape.cols);
      if (!sizes.ok()) continue;  // 36 channels of 2- or 4-bit codes do not fill whole words
      std::vector<uint32_t> codes(static_cast<size_t>(sizes->code_words));
      for (uint32_t& word : codes) word = static_cast<uint32_t>(rng());
      std::vector<float> scales(static_cast<size_t>(sizes->num_groups)), zeros(scales.size());
      for (float& v : scales) v = random_float();
      for (float& v : zeros) v = random_float();
      for (KvDtype dtype : {KvDtype::kFloat16, KvDtype::kBfloat16, KvDtype::kFloat32}) {
        const int64_t n = shape.rows * shape.cols;
        auto dequantize = [&](DequantizePath path) {
          HostTensor out(dtype, n);
          EXPECT_TRUE(internal::DequantizeOnPath(
                          path, params, codes, scales, zeros,
                          MatrixView::Dense(out.data(), dtype, shape.rows, shape.cols))
                          .ok());
          return out;
        };
        const HostTensor baseline = dequantize(DequantizePath::kBaseline);
        for (const DequantizePath path : paths) {
          const HostTensor simd = dequantize(path);
          EXPECT_EQ(0, std::memcmp(baseline.data(), simd.data(),
                                   static_cast<size_t>(baseline.size_bytes())))
              << "path " << static_cast<int>(path) << " bits " << c.bits << " axis "
              << static_cast<int>(c.axis) << " dtype " << DtypeName(dtype) << " shape "
              << shape.rows << "x" << shape.cols << "/" << shape.group_size;
        }
      }
    }
  }
}

TEST(QuantPathTest, EveryCpuPathQuantizesBitForBitAsTheBaseline) {
  using internal::DequantizePath;
  std::vector<DequantizePath> paths = SimdPaths();
  if (paths.empty()) {
    GTEST_SKIP() << "this CPU (or build) has no SIMD path to compare with the baseline";
  }
  paths.insert(paths.begin(), DequantizePath::kBaseline);
  // Inputs that include zeros of both signs, subnormals, huge values, infinities and NaNs, and
  // groups of one value repeated (a zero scale), so that every rounding and special case of the
  // codes is reached.
  std::mt19937_64 rng(11);
  const int64_t rows = 64, cols = 96;
  for (const bool with_specials : {false, true}) {
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (float& v : x) {
      v = with_specials && rng() % 16 == 0
              ? kSpecials[rng() % std::size(kSpecials)]
              : std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                           static_cast<int>(rng() % 20) - 10);
    }
    std::fill_n(x.begin(), 64, 0.75f);  // row 0's first groups: one value, a zero scale
    for (const QuantCase& c : kPathCases) {
      for (const bool fp16_params : {false, true}) {
        if (fp16_params && c.scheme == QuantScheme::kSymmetric) continue;
        QuantParams params{c.scheme, c.axis, c.bits, 32};
        params.fp16_params = fp16_params;
        const QuantizedSizes sizes = *QuantizedSizesFor(params, rows, cols);
        for (KvDtype dtype : {KvDtype::kFloat16, KvDtype::kBfloat16, KvDtype::kFloat32}) {
          SCOPED_TRACE(::testing::Message()
                       << "bits " << c.bits << " axis " << static_cast<int>(c.axis)
                       << " fp16 params " << fp16_params << " dtype " << DtypeName(dtype)
                       << " specials " << with_specials);
          HostTensor in(dtype, rows * cols);
          for (int64_t i = 0; i < rows * cols; ++i) in.Set(i, x[static_cast<size_t>(i)]);
          struct Out {
            absl::Status status;
            std::vector<uint32_t> codes;
            std::vector<float> scales, zeros;
          };
          std::vector<Out> outs;
          for (const DequantizePath path : paths) {
            Out& out = outs.emplace_back();
            out.codes.assign(static_cast<size_t>(sizes.code_words), 0xdeadbeefu);
            out.scales.assign(static_cast<size_t>(sizes.num_groups), -1.0f);
            out.zeros.assign(out.scales.size(), -1.0f);
            out.status = internal::QuantizeOnPath(
                path, params, ConstMatrixView::Dense(in.data(), dtype, rows, cols), out.codes,
                out.scales, out.zeros);
          }
          for (size_t i = 1; i < outs.size(); ++i) {
            SCOPED_TRACE(::testing::Message() << "path " << static_cast<int>(paths[i]));
            EXPECT_EQ(outs[0].status, outs[i].status);
            if (!outs[0].status.ok()) continue;
            EXPECT_EQ(outs[0].codes, outs[i].codes);
            EXPECT_EQ(0, std::memcmp(outs[0].scales.data(), outs[i].scales.data(),
                                     outs[0].scales.size() * sizeof(float)));
            EXPECT_EQ(0, std::memcmp(outs[0].zeros.data(), outs[i].zeros.data(),
                                     outs[0].zeros.size() * sizeof(float)));
          }
        }
      }
    }
  }
}

TEST(QuantValidationTest, RejectsBadShapesAndSizes) {
  std::vector<float> x(64 * 32);
  const auto view = ConstMatrixView::Dense(x.data(), KvDtype::kFloat32, 64, 32);
  std::vector<uint32_t> codes(64 * 32 / 4);
  std::vector<float> scales(64), zeros(64);
  const QuantParams good{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 8, 32};
  EXPECT_TRUE(Quantize(good, view, codes, scales, zeros).ok());
  const auto code = absl::StatusCode::kInvalidArgument;
  QuantParams p = good;
  p.bits = 3;
  EXPECT_EQ(Quantize(p, view, codes, scales, zeros).code(), code);
  p = good;
  p.scheme = QuantScheme::kSymmetric;
  p.bits = 4;
  EXPECT_EQ(Quantize(p, view, codes, scales, zeros).code(), code);
  p = good;
  p.group_size = 0;
  EXPECT_EQ(Quantize(p, view, codes, scales, zeros).code(), code);
  p.group_size = 24;  // 32 channels are not whole groups of 24
  EXPECT_EQ(Quantize(p, view, codes, scales, zeros).code(), code);
  p = good;
  p.axis = QuantAxis::kPerChannel;
  p.group_size = 48;  // 64 tokens are not whole groups of 48
  std::vector<float> groups_of_48(32 * 64 / 48);
  EXPECT_EQ(Quantize(p, view, codes, groups_of_48, zeros).code(), code);
  EXPECT_EQ(Quantize(good, view, std::span(codes).first(codes.size() - 1), scales, zeros).code(),
            code);
  EXPECT_EQ(Quantize(good, view, codes, std::span(scales).first(63), zeros).code(), code);
  EXPECT_EQ(Quantize(good, view, codes, scales, {}).code(), code);  // asymmetric needs zeros
  ConstMatrixView bad = view;
  bad.extent_elems -= 1;
  EXPECT_EQ(Quantize(good, bad, codes, scales, zeros).code(), code);
  bad = view;
  bad.row_stride = 16;
  EXPECT_EQ(Quantize(good, bad, codes, scales, zeros).code(), code);
  bad = view;
  bad.data = nullptr;
  EXPECT_EQ(Quantize(good, bad, codes, scales, zeros).code(), code);
  EXPECT_EQ(QuantizedSizesFor(good, 64, 6).status().code(), code);  // 6 * 8 bits not whole words
}

}  // namespace
}  // namespace strata::kernels
