#include "storage/device/streaming_copy.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::storage {
namespace {

#if defined(__x86_64__)

// Copies the head up to `alignment`-aligned destination with memcpy and returns how many bytes
// that took (all of them when `size` is smaller).
size_t AlignHead(std::byte* dst, const std::byte* src, size_t size, size_t alignment) {
  const size_t head = std::min(
      size, (alignment - (reinterpret_cast<uintptr_t>(dst) & (alignment - 1))) & (alignment - 1));
  std::memcpy(dst, src, head);
  return head;
}

__attribute__((target("avx2"))) void CopyAvx2(std::byte* dst, const std::byte* src, size_t size) {
  const size_t head = AlignHead(dst, src, size, 32);
  dst += head, src += head, size -= head;
  for (; size >= 128; dst += 128, src += 128, size -= 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + 96), d);
  }
  std::memcpy(dst, src, size);
}

void CopySse2(std::byte* dst, const std::byte* src, size_t size) {
  const size_t head = AlignHead(dst, src, size, 16);
  dst += head, src += head, size -= head;
  for (; size >= 64; dst += 64, src += 64, size -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + 48), d);
  }
  std::memcpy(dst, src, size);
}

const bool kHasAvx2 = __builtin_cpu_supports("avx2");

#endif

}  // namespace

void StreamingCopy(void* dst, const void* src, size_t size) {
#if defined(__x86_64__)
  auto* to = static_cast<std::byte*>(dst);
  const auto* from = static_cast<const std::byte*>(src);
  if (kHasAvx2) {
    CopyAvx2(to, from, size);
  } else {
    CopySse2(to, from, size);
  }
#else
  std::memcpy(dst, src, size);
#endif
}

void StreamingCopyFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace strata::storage
