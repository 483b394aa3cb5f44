// Dequantize's per-element formula and its SIMD row kernels for x86-64 (quant.cc's AVX2 and
// AVX-512 paths, in dequantize_rows_x86.cc): one row of x^ written straight as bf16 or fp16 from
// its codes (spread one byte per element), sixteen elements at a time, each bit for bit what
// DequantValue gives rounded once to the dtype (bf16 and fp16 rounded to nearest even, NaNs
// quieted keeping their top payload bits). quant_test compares every path with the baseline,
// specials included.
//
// Callers check the CPU first (cpu_features.h): the *Avx2 functions need HasAvx2F16c(), the
// *Avx512 ones HasAvx512f(). Pure functions over caller-owned buffers; thread-safe.
#pragma once

#include <cstdint>

#include "kernels/dtype.h"
#include "kernels/quant.h"

namespace strata::kernels::internal {

// x^ of one code: code * scale + zero (asymmetric) or int8(code) * scale (symmetric; adding a zero
// of 0 would turn -0 into +0), each operation rounded to fp32 (no fused multiply-add: the library
// builds with -ffp-contract=off).
template <bool kAsymmetric>
inline float DequantValue(uint8_t code, float scale, float zero) {
  if constexpr (kAsymmetric) return static_cast<float>(code) * scale + zero;
  return static_cast<float>(static_cast<int8_t>(code)) * scale;
}

// One row's inputs: `codes` one byte per element (int8 two's complement for the symmetric scheme),
// `scales` and `zeros` (zeros unused when symmetric) per group of the row (kPerToken: cols /
// group_size of them) or per column (kPerChannel: cols of them).
struct DequantizeRowArgs {
  const uint8_t* codes = nullptr;
  const float* scales = nullptr;
  const float* zeros = nullptr;
  int64_t cols = 0;
  int64_t group_size = 0;
  QuantAxis axis = QuantAxis::kPerToken;
  bool asymmetric = true;
};

#if defined(__x86_64__)
void DequantizeRowAvx2(const DequantizeRowArgs& row, Bf16* out);
void DequantizeRowAvx2(const DequantizeRowArgs& row, Fp16* out);
void DequantizeRowAvx512(const DequantizeRowArgs& row, Bf16* out);
void DequantizeRowAvx512(const DequantizeRowArgs& row, Fp16* out);

// Spread the 4-bit (SpreadCodes4Avx2) or 2-bit (SpreadCodes2Avx2) codes of the whole 16-byte
// blocks of `packed` (`bytes` long) one byte per code into `spread`, LSB first, and return the
// bytes done (the rest is the caller's). Need HasAvx2F16c().
int64_t SpreadCodes4Avx2(const uint8_t* packed, int64_t bytes, uint8_t* spread);
int64_t SpreadCodes2Avx2(const uint8_t* packed, int64_t bytes, uint8_t* spread);
#endif

}  // namespace strata::kernels::internal
