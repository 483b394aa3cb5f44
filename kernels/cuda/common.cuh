// Device-side helpers shared by the .cu files: storage types, fp32 conversions, dtype dispatch,
// warp reductions, error-flag reporting and launch-status checks. Included by kernels/cuda/*.cu
// only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "core/kv_layout.h"
#include "kernels/cuda/device.h"

namespace strata::kernels::cuda::internal {

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromF32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Reads / writes element `i` of a buffer whose dtype is only known at run time.
__device__ __forceinline__ float LoadAny(const void* base, int dtype, int64_t i) {
  if (dtype == static_cast<int>(KvDtype::kFloat32)) return static_cast<const float*>(base)[i];
  if (dtype == static_cast<int>(KvDtype::kBfloat16)) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
  return __half2float(static_cast<const __half*>(base)[i]);
}
__device__ __forceinline__ void StoreAny(void* base, int dtype, int64_t i, float v) {
  if (dtype == static_cast<int>(KvDtype::kFloat32)) {
    static_cast<float*>(base)[i] = v;
  } else if (dtype == static_cast<int>(KvDtype::kBfloat16)) {
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(base)[i] = __float2half_rn(v);
  }
}

// Calls fn(T{}) with T = float, __half or __nv_bfloat16 for a validated float dtype.
template <class Fn>
void DispatchDtype(KvDtype dtype, Fn&& fn) {
  switch (dtype) {
    case KvDtype::kBfloat16:
      fn(__nv_bfloat16{});
      break;
    case KvDtype::kFloat16:
      fn(__half{});
      break;
    default:
      fn(float{});
      break;
  }
}

__device__ __forceinline__ void ReportError(uint32_t* flags, uint32_t bit) {
  if (flags != nullptr) atomicOr(flags, bit);
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The status of the launch just made (cudaGetLastError).
absl::Status LaunchStatus(std::string_view what);

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace strata::kernels::cuda::internal
