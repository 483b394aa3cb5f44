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

inline uint16_t FloatToFp16Bits(float value) {
  const uint32_t u = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) {  // NaN: top payload bits, quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs_bits >> 13) & 0x3ffu));
  }
  if (abs_bits >= 0x477ff000u) {  // >= 65520 (or inf): rounds to infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (abs_bits < 0x38800000u) {  // below 2^-14: an fp16 subnormal (or zero)
    // value * 2^24 is exact in fp32 and the subnormal's mantissa is its nearest integer; a result
    // of 1024 is the smallest normal, whose encoding is the same integer.
    const float scaled = std::bit_cast<float>(abs_bits) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
  }
  const uint32_t exponent = (abs_bits >> 23) - 127u + 15u;
  const uint32_t mantissa = abs_bits & 0x7fffffu;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // a carry bumps the exponent
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
