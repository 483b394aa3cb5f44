#include "kernels/dtype.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace strata::kernels {
namespace {

// The two neighbours of `f` among values representable in the 16-bit type, and the rule that the
// rounded result must be the nearer one (ties: even mantissa). Decoded through our own decoders,
// which the exhaustive round-trip tests below check independently.
template <class Decode>
void ExpectNearestEven(float f, uint16_t got, Decode decode) {
  const double x = f;
  const double g = decode(got);
  if (std::isinf(g)) {  // overflow to infinity: only beyond the largest finite value
    ASSERT_GT(std::fabs(x), std::fabs(decode(static_cast<uint16_t>(got - 1)))) << "f=" << f;
    return;
  }
  // Every other finite encoding of the same sign must be no nearer than `got`.
  const uint16_t up = static_cast<uint16_t>(got + 1);
  const uint16_t down = static_cast<uint16_t>(got - 1);
  for (uint16_t other : {up, down}) {
    const double o = decode(other);
    if (std::isnan(o) || std::isinf(o) || std::signbit(o) != std::signbit(g)) continue;
    const double dg = std::fabs(x - g);
    const double d_other = std::fabs(x - o);
    ASSERT_LE(dg, d_other) << "f=" << f << " got=0x" << std::hex << got;
    if (dg == d_other) {
      ASSERT_EQ(got & 1, 0) << "tie not to even, f=" << f;
    }
  }
}

TEST(DtypeTest, Bf16RoundTripsEveryEncoding) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = Bf16BitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(f))));
      continue;
    }
    EXPECT_EQ(FloatToBf16Bits(f), b);
    EXPECT_EQ(std::bit_cast<uint32_t>(f) & 0xffff, 0u);  // bf16 = top half of fp32
  }
}

TEST(DtypeTest, Fp16RoundTripsEveryEncodingAndMatchesFloat16) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = Fp16BitsToFloat(static_cast<uint16_t>(b));
    _Float16 h;
    const uint16_t bits = static_cast<uint16_t>(b);
    std::memcpy(&h, &bits, 2);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(static_cast<float>(h)));
      EXPECT_TRUE(std::isnan(Fp16BitsToFloat(FloatToFp16Bits(f))));
      continue;
    }
    EXPECT_EQ(f, static_cast<float>(h)) << std::hex << b;  // compiler's own conversion
    EXPECT_EQ(FloatToFp16Bits(f), b);
  }
}

TEST(DtypeTest, RoundsToNearestEvenOnRandomFloats) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // Bias a third of the samples toward the fp16 range and exact ties.
    if (i % 3 == 1) u = (u & 0x8fffffffu) | 0x38000000u;
    if (i % 3 == 2) u = (u & 0xffffe000u) | 0x1000u;
    const float f = std::bit_cast<float>(u);
    if (std::isnan(f)) continue;
    ExpectNearestEven(f, FloatToBf16Bits(f), Bf16BitsToFloat);
    const uint16_t h = FloatToFp16Bits(f);
    if (std::fabs(f) < 65504.0f) ExpectNearestEven(f, h, Fp16BitsToFloat);
    // The compiler's float -> _Float16 conversion rounds to nearest even too.
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(h, ref_bits) << "f=" << f;
  }
}

TEST(DtypeTest, SpecialValues) {
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16Bits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBf16Bits(INFINITY), 0x7f80);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(NAN))));
  EXPECT_EQ(FloatToFp16Bits(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16Bits(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16Bits(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToFp16Bits(-0.0f), 0x8000);
  EXPECT_EQ(FloatToFp16Bits(5.9604644775390625e-8f), 0x0001);   // smallest subnormal
  EXPECT_EQ(FloatToFp16Bits(2.98023223876953125e-8f), 0x0000);  // half of it: tie to even (0)
  EXPECT_EQ(FloatToFp16Bits(8.940696716308594e-8f), 0x0002);    // 1.5 ulp: tie to even (2)
  EXPECT_TRUE(std::isnan(Fp16BitsToFloat(FloatToFp16Bits(NAN))));
  EXPECT_EQ(RoundToDtype(1.0f + 1e-3f, KvDtype::kBfloat16), 1.0f);
  EXPECT_EQ(RoundToDtype(1.0f + 1e-3f, KvDtype::kFloat32), 1.0f + 1e-3f);
}

TEST(DtypeTest, DispatchPicksTheStorageType) {
  EXPECT_EQ(DispatchFloatDtype(KvDtype::kBfloat16, [](auto t) { return sizeof(t); }), 2u);
  EXPECT_EQ(DispatchFloatDtype(KvDtype::kFloat16,
                               [](auto t) { return std::is_same_v<decltype(t), Fp16>; }),
            true);
  EXPECT_EQ(DispatchFloatDtype(KvDtype::kFloat32, [](auto t) { return sizeof(t); }), 4u);
  EXPECT_FALSE(IsFloatDtype(KvDtype::kInt8));
}

}  // namespace
}  // namespace strata::kernels
