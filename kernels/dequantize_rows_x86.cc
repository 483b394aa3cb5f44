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

// x^ of the eight codes at q with their scales and zeros.
template <bool kAsymmetric>
[[gnu::target("avx2")]] inline __m256 ValuesAvx2(const uint8_t* q, __m256 scale, __m256 zero) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q));
  const __m256i codes = kAsymmetric ? _mm256_cvtepu8_epi32(bytes) : _mm256_cvtepi8_epi32(bytes);
  const __m256 product = _mm256_mul_ps(_mm256_cvtepi32_ps(codes), scale);
  return kAsymmetric ? _mm256_add_ps(product, zero) : product;
}

// ---- Blocks: sixteen elements from q to out, as struct templates whose Run the row's loops call.
// Scales and zeros: one each for all sixteen (kPerToken), or sixteen each (kPerChannel).

// AVX2: two halves of eight.
template <class T, bool kAsymmetric, bool kPerToken>
struct Avx2Block {
  [[gnu::target("avx2,f16c")]] static void Run(const uint8_t* q, const float* s, const float* z,
                                               T* out) {
    const __m256 scale_a = kPerToken ? _mm256_set1_ps(*s) : _mm256_loadu_ps(s);
    const __m256 scale_b = kPerToken ? scale_a : _mm256_loadu_ps(s + 8);
    __m256 zero_a = _mm256_setzero_ps(), zero_b = zero_a;
    if constexpr (kAsymmetric) {
      zero_a = kPerToken ? _mm256_set1_ps(*z) : _mm256_loadu_ps(z);
      zero_b = kPerToken ? zero_a : _mm256_loadu_ps(z + 8);
    }
    const __m256 a = ValuesAvx2<kAsymmetric>(q, scale_a, zero_a);
    const __m256 b = ValuesAvx2<kAsymmetric>(q + 8, scale_b, zero_b);
    if constexpr (std::is_same_v<T, Fp16>) {
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
  [[gnu::target("avx512f,avx2,f16c")]] static void Run(const uint8_t* q, const float* s,
                                                       const float* z, T* out) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    const __m512i codes = kAsymmetric ? _mm512_cvtepu8_epi32(bytes) : _mm512_cvtepi8_epi32(bytes);
    __m512 x = _mm512_mul_ps(_mm512_cvtepi32_ps(codes),
                             kPerToken ? _mm512_set1_ps(*s) : _mm512_loadu_ps(s));
    if constexpr (kAsymmetric) {
      x = _mm512_add_ps(x, kPerToken ? _mm512_set1_ps(*z) : _mm512_loadu_ps(z));
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
// flattens it, so that its blocks inline there.
template <class T, bool kAsymmetric, template <class, bool, bool> class Block>
inline void Row(const DequantizeRowArgs& a, T* out) {
  const uint8_t* q = a.codes;
  const float* s = a.scales;
  const float* z = a.zeros;
  if (a.axis == QuantAxis::kPerToken) {
    const int64_t groups = a.cols / a.group_size;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t end = (g + 1) * a.group_size;
      int64_t c = g * a.group_size;
      for (; c + 16 <= end; c += 16) {
        Block<T, kAsymmetric, true>::Run(q + c, s + g, kAsymmetric ? z + g : nullptr, out + c);
      }
      for (; c < end; ++c) {
        out[c] = FromFloat<T>(DequantValue<kAsymmetric>(q[c], s[g], kAsymmetric ? z[g] : 0.0f));
      }
    }
    return;
  }
  int64_t c = 0;
  for (; c + 16 <= a.cols; c += 16) {
    Block<T, kAsymmetric, false>::Run(q + c, s + c, kAsymmetric ? z + c : nullptr, out + c);
  }
  for (; c < a.cols; ++c) {
    out[c] = FromFloat<T>(DequantValue<kAsymmetric>(q[c], s[c], kAsymmetric ? z[c] : 0.0f));
  }
}

template <class T>
[[gnu::target("avx2,f16c"), gnu::flatten]] void RowAvx2(const DequantizeRowArgs& a, T* out) {
  a.asymmetric ? Row<T, true, Avx2Block>(a, out) : Row<T, false, Avx2Block>(a, out);
}
template <class T>
[[gnu::target("avx512f,avx2,f16c"), gnu::flatten]] void RowAvx512(const DequantizeRowArgs& a,
                                                                  T* out) {
  a.asymmetric ? Row<T, true, Avx512Block>(a, out) : Row<T, false, Avx512Block>(a, out);
}

template <int kBits>
[[gnu::target("avx2")]] int64_t SpreadCodes(const uint8_t* packed, int64_t bytes, uint8_t* spread) {
  static_assert(kBits == 4 || kBits == 2);
  constexpr int kPerByte = 8 / kBits;
  const __m128i mask = _mm_set1_epi8(static_cast<char>((1 << kBits) - 1));
  int64_t j = 0;
  for (; j + 16 <= bytes; j += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + j));
    auto* out = reinterpret_cast<__m128i*>(spread + j * kPerByte);
    // Code k of each byte (shifting 16-bit lanes is exact after the mask: bits shifted in from
    // the lane's other byte are masked off).
    const __m128i c0 = _mm_and_si128(b, mask);
    const __m128i c1 = _mm_and_si128(_mm_srli_epi16(b, kBits), mask);
    if constexpr (kBits == 4) {
      _mm_storeu_si128(out, _mm_unpacklo_epi8(c0, c1));
      _mm_storeu_si128(out + 1, _mm_unpackhi_epi8(c0, c1));
    } else {
      const __m128i c2 = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
      const __m128i c3 = _mm_and_si128(_mm_srli_epi16(b, 6), mask);
      const __m128i low01 = _mm_unpacklo_epi8(c0, c1), high01 = _mm_unpackhi_epi8(c0, c1);
      const __m128i low23 = _mm_unpacklo_epi8(c2, c3), high23 = _mm_unpackhi_epi8(c2, c3);
      _mm_storeu_si128(out, _mm_unpacklo_epi16(low01, low23));
      _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(low01, low23));
      _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(high01, high23));
      _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(high01, high23));
    }
  }
  return j;
}

}  // namespace

void DequantizeRowAvx2(const DequantizeRowArgs& row, Bf16* out) { RowAvx2(row, out); }
void DequantizeRowAvx2(const DequantizeRowArgs& row, Fp16* out) { RowAvx2(row, out); }
void DequantizeRowAvx512(const DequantizeRowArgs& row, Bf16* out) { RowAvx512(row, out); }
void DequantizeRowAvx512(const DequantizeRowArgs& row, Fp16* out) { RowAvx512(row, out); }
int64_t SpreadCodes4Avx2(const uint8_t* packed, int64_t bytes, uint8_t* spread) {
  return SpreadCodes<4>(packed, bytes, spread);
}
int64_t SpreadCodes2Avx2(const uint8_t* packed, int64_t bytes, uint8_t* spread) {
  return SpreadCodes<2>(packed, bytes, spread);
}

}  // namespace strata::kernels::internal

#endif  // __x86_64__
