// Element types of the kernels' CPU references and their conversions to and from fp32.
//
// Bf16 and Fp16 are 16-bit storage types with the same bit layout as CUDA's __nv_bfloat16 and
// __half, so a buffer written on one side reads the same on the other. Conversions from fp32
// round to nearest, ties to even (as __float2bfloat16_rn / __float2half_rn); NaN stays NaN (a
// quiet NaN), overflow becomes infinity, fp16 subnormals are produced and read exactly.
// Everything here is a pure function; thread-safe.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/kv_layout.h"

namespace strata::kernels {

struct Bf16 {
  uint16_t bits = 0;
};
struct Fp16 {
  uint16_t bits = 0;
};

inline uint16_t FloatToBf16Bits(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep sign and payload, make quiet
  }
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

inline float Bf16BitsToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

// Branch-free (every case is computed and one selected with masks), so that loops converting
// spans of floats vectorize. dtype_test compares it with the compiler's float -> _Float16; it was
// also checked equal, on all 2^32 inputs, to the branching definition it replaced.
inline uint16_t FloatToFp16Bits(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  const auto magnitude = static_cast<int32_t>(abs_bits);  // signed compares vectorize on SSE2
  // Normal: rebias the exponent and round the 13 dropped bits to nearest, ties to even; a carry
  // bumps the exponent (up to infinity).
  const uint32_t normal =
      (abs_bits - ((127u - 15u) << 23) + 0xfffu + ((abs_bits >> 13) & 1u)) >> 13;
  // Below 2^-14, an fp16 subnormal (or zero): adding 0.5 leaves the value's multiple of 2^-24 in
  // the low mantissa bits of the sum, rounded to nearest even by the fp32 addition itself.
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(abs_bits) + 0.5f) -
                             std::bit_cast<uint32_t>(0.5f);
  // NaN: keep the top payload bits, make it quiet.
  const uint32_t nan = 0x7e00u | ((abs_bits >> 13) & 0x3ffu);
  auto select = [](bool condition, uint32_t if_true, uint32_t if_false) {
    const uint32_t mask = 0u - static_cast<uint32_t>(condition);
    return (if_true & mask) | (if_false & ~mask);
  };
  uint32_t half = select(magnitude < 0x38800000, subnormal, normal);
  half = select(magnitude >= 0x477ff000, 0x7c00u, half);  // >= 65520 (or inf): infinity
  half = select(magnitude > 0x7f800000, nan, half);
  return static_cast<uint16_t>(sign | half);
}

inline float Fp16BitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// ToFloat / FromFloat over the three floating storage types the kernels accept.
inline float ToFloat(float v) { return v; }
inline float ToFloat(Bf16 v) { return Bf16BitsToFloat(v.bits); }
inline float ToFloat(Fp16 v) { return Fp16BitsToFloat(v.bits); }

template <class T>
inline T FromFloat(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, Bf16>) {
    return Bf16{FloatToBf16Bits(v)};
  } else {
    static_assert(std::is_same_v<T, Fp16>);
    return Fp16{FloatToFp16Bits(v)};
  }
}

// `v` rounded to `dtype` and back: the value a float takes once stored in that dtype.
inline float RoundToDtype(float v, KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kBfloat16:
      return Bf16BitsToFloat(FloatToBf16Bits(v));
    case KvDtype::kFloat16:
      return Fp16BitsToFloat(FloatToFp16Bits(v));
    default:
      return v;
  }
}

// True for the dtypes the floating-point kernels read and write: fp16, bf16, fp32.
inline bool IsFloatDtype(KvDtype dtype) {
  return dtype == KvDtype::kFloat16 || dtype == KvDtype::kBfloat16 || dtype == KvDtype::kFloat32;
}

// Calls fn(T{}) with T the storage type of `dtype` (float, Bf16 or Fp16). `dtype` must satisfy
// IsFloatDtype (callers validate first).
template <class Fn>
decltype(auto) DispatchFloatDtype(KvDtype dtype, Fn&& fn) {
  switch (dtype) {
    case KvDtype::kBfloat16:
      return fn(Bf16{});
    case KvDtype::kFloat16:
      return fn(Fp16{});
    default:
      return fn(float{});
  }
}

}  // namespace strata::kernels
