// The SIMD row kernels of internal/dequantize_rows.h (x86-64 only; empty elsewhere).
#include "kernels/internal/dequantize_rows.h"

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as the unused merge source of their
// masked builtins, which -Wmaybe-uninitialized reports in the intrinsics' header once they inline
// (a known false positive); the warning stays on for this file's own code.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstring>
#include <type_traits>

namespace strata::kernels::internal {
namespace {

constexpr int kRoundNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// ---- AVX2 helpers.

// fp32 values as bf16 bits (one per 32-bit lane), rounded to nearest even as FloatToBf16Bits
// rounds a number; a NaN's lane is QuietNansAvx2's to fix.
[[gnu::target("avx2")]] inline __m256i Bf16RoundedAvx2(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  return _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)),
                           16);
}

// `bits` with each NaN lane of x made as FloatToBf16Bits makes it: sign and top payload kept,
// quiet.
[[gnu::target("avx2")]] inline __m256i QuietNansAvx2(__m256 x, __m256i bits) {
  const __m256i quiet =
      _mm256_or_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(bits, quiet, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
}

// x^ of the eight codes in the low bytes of `bytes` with their scales and zeros.
template <bool kAsymmetric>
[[gnu::target("avx2")]] inline __m256 ValuesAvx2(__m128i bytes, __m256 scale, __m256 zero) {
  const __m256i codes = kAsymmetric ? _mm256_cvtepu8_epi32(bytes) : _mm256_cvtepi8_epi32(bytes);
  const __m256 product = _mm256_mul_ps(_mm256_cvtepi32_ps(codes), scale);
  return kAsymmetric ? _mm256_add_ps(product, zero) : product;
}

// ---- Codes: the sixteen codes from element c of a row, one per byte. For 4- and 2-bit codes, c
// starts a byte (c * kBits a multiple of 8); the byte's codes go LSB first.
template <int kBits>
[[gnu::target("avx2")]] inline __m128i Codes16(const uint8_t* row, int64_t c) {
  static_assert(kBits == 8 || kBits == 4 || kBits == 2);
  if constexpr (kBits == 8) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + c));
  } else if constexpr (kBits == 4) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2));
    const __m128i mask = _mm_set1_epi8(0x0f);
    // Shifting 16-bit lanes is exact after the mask: bits shifted in from the other byte go.
    return _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
  } else {
    int32_t word;
    std::memcpy(&word, row + c / 4, sizeof(word));
    const __m128i b = _mm_cvtsi32_si128(word);
    const __m128i mask = _mm_set1_epi8(0x03);
    const __m128i c0 = _mm_and_si128(b, mask);
    const __m128i c1 = _mm_and_si128(_mm_srli_epi16(b, 2), mask);
    const __m128i c2 = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    const __m128i c3 = _mm_and_si128(_mm_srli_epi16(b, 6), mask);
    return _mm_unpacklo_epi16(_mm_unpacklo_epi8(c0, c1), _mm_unpacklo_epi8(c2, c3));
  }
}

// ---- Blocks: sixteen codes (one per byte) to out, as struct templates whose Run the row's loops
// call. Scales and zeros: one each for all sixteen (kPerToken), or sixteen each (kPerChannel).

// AVX2: two halves of eight.
template <class T, bool kAsymmetric, bool kPerToken>
struct Avx2Block {
  [[gnu::target("avx2,f16c")]] static void Run(__m128i codes, const float* s, const float* z,
                                               T* out) {
    const __m256 scale_a = kPerToken ? _mm256_set1_ps(*s) : _mm256_loadu_ps(s);
    const __m256 scale_b = kPerToken ? scale_a : _mm256_loadu_ps(s + 8);
    __m256 zero_a = _mm256_setzero_ps(), zero_b = zero_a;
    if constexpr (kAsymmetric) {
      zero_a = kPerToken ? _mm256_set1_ps(*z) : _mm256_loadu_ps(z);
      zero_b = kPerToken ? zero_a : _mm256_loadu_ps(z + 8);
    }
    const __m256 a = ValuesAvx2<kAsymmetric>(codes, scale_a, zero_a);
    const __m256 b = ValuesAvx2<kAsymmetric>(_mm_unpackhi_epi64(codes, codes), scale_b, zero_b);
    if constexpr (std::is_same_v<T, float>) {
      _mm256_storeu_ps(out, a);
      _mm256_storeu_ps(out + 8, b);
    } else if constexpr (std::is_same_v<T, Fp16>) {
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(out),
          _mm256_set_m128i(_mm256_cvtps_ph(b, kRoundNearest), _mm256_cvtps_ph(a, kRoundNearest)));
    } else {
      __m256i bits_a = Bf16RoundedAvx2(a), bits_b = Bf16RoundedAvx2(b);
      const __m256 nan =
          _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
      if (_mm256_movemask_ps(nan) != 0) {  // decoded KV almost never holds a NaN
        bits_a = QuietNansAvx2(a, bits_a);
        bits_b = QuietNansAvx2(b, bits_b);
      }
      // packus interleaves the 128-bit lanes (a0-3 b0-3 a4-7 b4-7); the permutation restores
      // their order.
      const __m256i packed = _mm256_packus_epi32(bits_a, bits_b);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                          _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0)));
    }
  }
};

// AVX-512: one register of sixteen.
template <class T, bool kAsymmetric, bool kPerToken>
struct Avx512Block {
  [[gnu::target("avx512f,avx2,f16c")]] static void Run(__m128i codes, const float* s,
                                                       const float* z, T* out) {
    const __m512i wide = kAsymmetric ? _mm512_cvtepu8_epi32(codes) : _mm512_cvtepi8_epi32(codes);
    __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(wide),
                             kPerToken ? _mm512_set1_ps(*s) : _mm512_loadu_ps(s));
    if constexpr (kAsymmetric) {
      x = _mm512_add_ps(x, kPerToken ? _mm512_set1_ps(*z) : _mm512_loadu_ps(z));
    }
    if constexpr (std::is_same_v<T, float>) {
      _mm512_storeu_ps(out, x);
      return;
    }
    __m256i half;
    if constexpr (std::is_same_v<T, Fp16>) {
      half = _mm512_cvtps_ph(x, kRoundNearest);
    } else {
      const __m512i u = _mm512_castps_si512(x);
      const __m512i high = _mm512_srli_epi32(u, 16);
      const __m512i odd = _mm512_and_si512(high, _mm512_set1_epi32(1));
      __m512i bits = _mm512_srli_epi32(
          _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd)), 16);
      const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
      if (nan != 0) {  // as FloatToBf16Bits: sign and top payload kept, quiet
        bits = _mm512_mask_mov_epi32(bits, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
      }
      half = _mm512_cvtepi32_epi16(bits);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), half);
  }
};

// ---- The row, over sixteen-element blocks of either kind.

// The row's loops. Not inlined into a caller without the block's target: each path's wrapper below
// flattens it, so that its blocks inline there. A group's scale and zero are read into locals
// first, which nothing the loop stores can alias, so that their broadcasts leave the loop.
template <class T, int kBits, bool kAsymmetric, template <class, bool, bool> class Block>
inline void Row(const DequantizeRowArgs& a, T* out) {
  const uint8_t* q = a.codes;
  const float* s = a.scales;
  const float* z = a.zeros;
  const int64_t cols = a.cols, group_size = a.group_size;  // locals: stores may alias `a`
  if (a.axis == QuantAxis::kPerToken) {
    for (int64_t g = 0; g < cols / group_size; ++g) {
      const float scale = s[g], zero = kAsymmetric ? z[g] : 0.0f;
      const int64_t end = (g + 1) * group_size;
      int64_t c = g * group_size;
      // A group of 4- or 2-bit codes that starts inside a byte (group sizes no model uses) takes
      // the scalar loop.
      if (c * kBits % 8 == 0) {
        for (; c + 16 <= end; c += 16) {
          Block<T, kAsymmetric, true>::Run(Codes16<kBits>(q, c), &scale, &zero, out + c);
        }
      }
      for (; c < end; ++c) {
        out[c] = FromFloat<T>(DequantValue<kAsymmetric>(CodeAt<kBits>(q, c), scale, zero));
      }
    }
    return;
  }
  int64_t c = 0;
  for (; c + 16 <= cols; c += 16) {
    Block<T, kAsymmetric, false>::Run(Codes16<kBits>(q, c), s + c, kAsymmetric ? z + c : nullptr,
                                      out + c);
  }
  for (; c < cols; ++c) {
    out[c] = FromFloat<T>(
        DequantValue<kAsymmetric>(CodeAt<kBits>(q, c), s[c], kAsymmetric ? z[c] : 0.0f));
  }
}

// The row of `a`'s code width and scheme.
template <class T, template <class, bool, bool> class Block>
inline void AnyRow(const DequantizeRowArgs& a, T* out) {
  if (!a.asymmetric) return Row<T, 8, false, Block>(a, out);
  switch (a.bits) {
    case 8:
      return Row<T, 8, true, Block>(a, out);
    case 4:
      return Row<T, 4, true, Block>(a, out);
    default:
      return Row<T, 2, true, Block>(a, out);
  }
}

template <class T>
[[gnu::target("avx2,f16c"), gnu::flatten]] void RowAvx2(const DequantizeRowArgs& a, T* out) {
  AnyRow<T, Avx2Block>(a, out);
}
template <class T>
[[gnu::target("avx512f,avx2,f16c"), gnu::flatten]] void RowAvx512(const DequantizeRowArgs& a,
                                                                  T* out) {
  AnyRow<T, Avx512Block>(a, out);
}

}  // namespace

void DequantizeRowAvx2(const DequantizeRowArgs& row, float* out) { RowAvx2(row, out); }
void DequantizeRowAvx2(const DequantizeRowArgs& row, Bf16* out) { RowAvx2(row, out); }
void DequantizeRowAvx2(const DequantizeRowArgs& row, Fp16* out) { RowAvx2(row, out); }
void DequantizeRowAvx512(const DequantizeRowArgs& row, float* out) { RowAvx512(row, out); }
void DequantizeRowAvx512(const DequantizeRowArgs& row, Bf16* out) { RowAvx512(row, out); }
void DequantizeRowAvx512(const DequantizeRowArgs& row, Fp16* out) { RowAvx512(row, out); }

}  // namespace strata::kernels::internal

#endif  // __x86_64__
