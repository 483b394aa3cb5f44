#include "storage/codec/kv_error.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu_features.h"
#include "kernels/dtype.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::storage {
namespace {

// CompareKv sums in kLanes interleaved partial sums (element i into lane i % kLanes), added up at
// the end: kLanes independent chains of additions instead of one. The largest difference is
// kept per lane too. Both CPU paths assign elements to lanes alike and add them in the same
// order, in double, without fused multiply-adds, so they give the same result bit for bit.
constexpr uint64_t kLanes = 4;

struct LaneSums {
  std::array<double, kLanes> err2{};
  std::array<double, kLanes> norm2{};
  std::array<double, kLanes> max_abs{};  // a NaN difference leaves its lane's maximum as it was
};

template <class T>
double Element(const std::byte* payload, uint64_t i) {
  T value;
  std::memcpy(&value, payload + i * sizeof(T), sizeof(T));
  return static_cast<double>(kernels::ToFloat(value));
}

// Elements [from, n) into their lanes, one at a time.
template <class T>
void AddElements(const std::byte* original, const std::byte* decoded, uint64_t from, uint64_t n,
                 LaneSums& sums) {
  for (uint64_t i = from; i < n; ++i) {
    const uint64_t lane = i % kLanes;
    const double x = Element<T>(original, i);
    const double d = x - Element<T>(decoded, i);
    sums.err2[lane] += d * d;
    sums.norm2[lane] += x * x;
    sums.max_abs[lane] = std::max(sums.max_abs[lane], std::fabs(d));
  }
}

void CompareBaseline(KvDtype dtype, const std::byte* original, const std::byte* decoded, uint64_t n,
                     LaneSums& sums) {
  kernels::DispatchFloatDtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    AddElements<T>(original, decoded, 0, n, sums);
  });
}

#if defined(__x86_64__)
// kLanes elements of `payload` from element i, in double: exact, as ToFloat is (a NaN's payload
// may differ).
template <class T>
[[gnu::target("avx2,f16c")]] inline __m256d LoadLanes(const std::byte* payload, uint64_t i) {
  const std::byte* at = payload + i * sizeof(T);
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_cvtps_pd(_mm_loadu_ps(reinterpret_cast<const float*>(at)));
  } else {
    const __m128i half = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(at));
    if constexpr (std::is_same_v<T, kernels::Fp16>) {
      return _mm256_cvtps_pd(_mm_cvtph_ps(half));
    } else {
      static_assert(std::is_same_v<T, kernels::Bf16>);
      return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(half), 16)));
    }
  }
}

template <class T>
[[gnu::target("avx2,f16c")]] void CompareAvx2Of(const std::byte* original, const std::byte* decoded,
                                                uint64_t n, LaneSums& sums) {
  __m256d err2 = _mm256_setzero_pd(), norm2 = _mm256_setzero_pd(), max_abs = _mm256_setzero_pd();
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  uint64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256d x = LoadLanes<T>(original, i);
    const __m256d d = _mm256_sub_pd(x, LoadLanes<T>(decoded, i));
    err2 = _mm256_add_pd(err2, _mm256_mul_pd(d, d));
    norm2 = _mm256_add_pd(norm2, _mm256_mul_pd(x, x));
    // maxpd answers its second operand when either is a NaN: the lane keeps its maximum.
    max_abs = _mm256_max_pd(_mm256_and_pd(d, abs_mask), max_abs);
  }
  _mm256_storeu_pd(sums.err2.data(), err2);
  _mm256_storeu_pd(sums.norm2.data(), norm2);
  _mm256_storeu_pd(sums.max_abs.data(), max_abs);
  AddElements<T>(original, decoded, i, n, sums);
}

void CompareAvx2(KvDtype dtype, const std::byte* original, const std::byte* decoded, uint64_t n,
                 LaneSums& sums) {
  kernels::DispatchFloatDtype(
      dtype, [&](auto tag) { CompareAvx2Of<decltype(tag)>(original, decoded, n, sums); });
}
#endif

KvError Total(const LaneSums& sums) {
  KvError error;
  double err2 = 0, norm2 = 0;
  for (uint64_t lane = 0; lane < kLanes; ++lane) {
    err2 += sums.err2[lane];
    norm2 += sums.norm2[lane];
    error.max_abs = std::max(error.max_abs, sums.max_abs[lane]);
  }
  error.relative_frobenius = norm2 > 0 ? std::sqrt(err2 / norm2) : std::sqrt(err2);
  return error;
}

}  // namespace

float ElementAt(KvDtype dtype, std::span<const std::byte> payload, uint64_t i) {
  return kernels::DispatchFloatDtype(dtype, [&](auto tag) {
    return static_cast<float>(Element<decltype(tag)>(payload.data(), i));  // exact both ways
  });
}

KvError CompareKv(KvDtype dtype, std::span<const std::byte> original,
                  std::span<const std::byte> decoded) {
  STRATA_CHECK(original.size() == decoded.size());
  const uint64_t n = original.size() / DtypeSizeBytes(dtype);
  LaneSums sums;
#if defined(__x86_64__)
  if (kernels::HasAvx2F16c()) {
    CompareAvx2(dtype, original.data(), decoded.data(), n, sums);
    return Total(sums);
  }
#endif
  CompareBaseline(dtype, original.data(), decoded.data(), n, sums);
  return Total(sums);
}

namespace internal {

KvError CompareKvBaseline(KvDtype dtype, std::span<const std::byte> original,
                          std::span<const std::byte> decoded) {
  STRATA_CHECK(original.size() == decoded.size());
  LaneSums sums;
  CompareBaseline(dtype, original.data(), decoded.data(), original.size() / DtypeSizeBytes(dtype),
                  sums);
  return Total(sums);
}

}  // namespace internal
}  // namespace strata::storage
