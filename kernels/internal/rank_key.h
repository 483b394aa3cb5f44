// The total order used by every top-k selection (pages, CacheBlend tokens), shared by the CPU
// references and the CUDA kernels so both pick exactly the same indices: a higher score ranks
// first, equal scores rank by lower index, +0 and -0 are equal, and NaN ranks below every number.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define STRATA_HOST_DEVICE __host__ __device__
#else
#define STRATA_HOST_DEVICE
#endif

namespace strata::kernels::internal {

// A unique 64-bit key per (score, index): larger key = better rank.
STRATA_HOST_DEVICE inline uint64_t RankKey(float score, uint32_t index) {
  uint32_t bits = 0;
  std::memcpy(&bits, &score, sizeof(bits));
  uint32_t ordered = 0;
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    ordered = 0;  // NaN
  } else if ((bits & 0x7fffffffu) == 0) {
    ordered = 0x80000000u;  // +0 and -0
  } else if (bits & 0x80000000u) {
    ordered = ~bits;
  } else {
    ordered = bits | 0x80000000u;
  }
  return (static_cast<uint64_t>(ordered) << 32) | static_cast<uint64_t>(0xffffffffu - index);
}

STRATA_HOST_DEVICE inline uint32_t RankKeyIndex(uint64_t key) {
  return 0xffffffffu - static_cast<uint32_t>(key & 0xffffffffu);
}

}  // namespace strata::kernels::internal
