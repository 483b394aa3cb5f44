// Dequantize's per-element formula and its SIMD row kernels for x86-64 (quant.cc's AVX2 and
// AVX-512 paths, in dequantize_rows_x86.cc): one row of x^ written straight as fp32, bf16 or fp16
// from its codes as they are stored (8-, 4- or 2-bit, unpacked in registers), sixteen elements at
// a time, each bit for bit what DequantValue gives rounded once to the dtype (bf16 and fp16
// rounded to nearest even, NaNs quieted keeping their top payload bits). quant_test compares every
// path with the baseline, specials included.
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

// Code `c` of a row whose codes are packed `kBits` per element, LSB first, from `row`.
template <int kBits>
inline uint8_t CodeAt(const uint8_t* row, int64_t c) {
  if constexpr (kBits == 8) return row[c];
  return static_cast<uint8_t>((row[c * kBits / 8] >> (c * kBits % 8)) & ((1u << kBits) - 1u));
}

// One row's inputs: `codes` as Quantize packs them, `bits` per element LSB first from the row's
// first byte (8: one byte per element, int8 two's complement for the symmetric scheme), `scales`
// and `zeros` (zeros unused when symmetric) per group of the row (kPerToken: cols / group_size of
// them) or per column (kPerChannel: cols of them).
struct DequantizeRowArgs {
  const uint8_t* codes = nullptr;
  int bits = 8;  // 8, 4 or 2 (asymmetric only below 8)
  const float* scales = nullptr;
  const float* zeros = nullptr;
  int64_t cols = 0;
  int64_t group_size = 0;
  QuantAxis axis = QuantAxis::kPerToken;
  bool asymmetric = true;
};

#if defined(__x86_64__)
void DequantizeRowAvx2(const DequantizeRowArgs& row, float* out);
void DequantizeRowAvx2(const DequantizeRowArgs& row, Bf16* out);
void DequantizeRowAvx2(const DequantizeRowArgs& row, Fp16* out);
void DequantizeRowAvx512(const DequantizeRowArgs& row, float* out);
void DequantizeRowAvx512(const DequantizeRowArgs& row, Bf16* out);
void DequantizeRowAvx512(const DequantizeRowArgs& row, Fp16* out);
#endif

}  // namespace strata::kernels::internal
