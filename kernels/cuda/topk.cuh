// Device top-k selection in one thread block per segment, in the shared rank order of
// kernels/internal/rank_key.h (so it picks exactly the indices the CPU reference picks): an 8-pass
// radix select finds the k-th best 64-bit rank key, then an ordered compaction writes the indices
// of all keys >= it in ascending index order, followed by `append_count` consecutive indices from
// `append_begin`. Included by kernels/cuda/*.cu only.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/internal/rank_key.h"

namespace strata::kernels::cuda::internal {

inline constexpr int kTopKThreads = 512;

// Each .cu that includes this header gets its own copy (whole-program compilation).
namespace {

// Exclusive prefix sum of `value` over the block; *total gets the block's sum. All threads call it.
__device__ __forceinline__ int BlockExclusiveScan(int value, int* total) {
  __shared__ int warp_sums[kTopKThreads / 32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  int inclusive = value;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kTopKThreads / 32 ? warp_sums[lane] : 0;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int other = __shfl_up_sync(0xffffffffu, w, offset);
      if (lane >= offset) w += other;
    }
    if (lane < kTopKThreads / 32) warp_sums[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  const int warp_prefix = warp == 0 ? 0 : warp_sums[warp - 1];
  *total = warp_sums[kTopKThreads / 32 - 1];
  __syncthreads();  // warp_sums is reused by the next call
  return warp_prefix + inclusive - value;
}

// Segment blockIdx.x: scores[blockIdx.x * score_stride + i], i < n. Writes k (<= n) selected
// indices, then the appended ones, to out[blockIdx.x * out_stride + ...].
__global__ void __launch_bounds__(kTopKThreads)
    SelectTopKKernel(const float* scores, int64_t score_stride, int64_t n, int64_t k, int32_t* out,
                     int64_t out_stride, int64_t append_begin, int64_t append_count) {
  __shared__ unsigned int histogram[256];
  __shared__ unsigned long long shared_prefix;
  __shared__ long long shared_remaining;
  const float* seg = scores + blockIdx.x * score_stride;
  int32_t* dst = out + blockIdx.x * out_stride;
  uint64_t threshold = 0;  // k >= n: every key qualifies
  if (k == 0) {
    threshold = ~uint64_t{0};  // above every rank key: none qualifies
  } else if (k < n) {
    if (threadIdx.x == 0) {
      shared_prefix = 0;
      shared_remaining = k;
    }
    uint64_t mask = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int d = threadIdx.x; d < 256; d += blockDim.x) histogram[d] = 0;
      __syncthreads();
      const uint64_t prefix = shared_prefix;
      for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const uint64_t key = kernels::internal::RankKey(seg[i], static_cast<uint32_t>(i));
        if ((key & mask) == prefix) atomicAdd(&histogram[(key >> shift) & 0xffu], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        long long cumulative = 0;
        for (int d = 255; d >= 0; --d) {
          if (cumulative + histogram[d] >= shared_remaining) {
            shared_prefix = prefix | (static_cast<uint64_t>(d) << shift);
            shared_remaining -= cumulative;
            break;
          }
          cumulative += histogram[d];
        }
      }
      mask |= uint64_t{0xff} << shift;
      __syncthreads();
    }
    threshold = shared_prefix;
  }
  int64_t base = 0;
  for (int64_t start = 0; start < n; start += blockDim.x) {
    const int64_t i = start + threadIdx.x;
    const int flag =
        i < n && kernels::internal::RankKey(seg[i], static_cast<uint32_t>(i)) >= threshold;
    int total = 0;
    const int position = BlockExclusiveScan(flag, &total);
    if (flag) dst[base + position] = static_cast<int32_t>(i);
    base += total;
  }
  for (int64_t j = threadIdx.x; j < append_count; j += blockDim.x) {
    dst[k + j] = static_cast<int32_t>(append_begin + j);
  }
}

}  // namespace
}  // namespace strata::kernels::cuda::internal
