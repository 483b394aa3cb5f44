// CUDA runtime glue shared by the kernels' CUDA entry points: device discovery, an owning device
// allocation, launch options, and the device-side error flags.
//
// Every CUDA entry point in kernels/cuda/ takes device pointers (views and std::span over device
// memory: only their sizes are read on the host) and enqueues its work on LaunchOptions::stream;
// it returns once the work is enqueued. Shapes, strides, extents and dtypes are validated on the
// host, with the same checks as the CPU reference (kInvalidArgument, nothing launched). Values that
// live in device memory (block ids, positions, sequence lengths) cannot be read without a sync, so
// the kernels check them on the device: an out-of-range value never causes an out-of-bounds access;
// the affected element is skipped (its output is unspecified) and, when LaunchOptions::error_flags
// is set, a DeviceError bit is OR-ed into that device word. ReadDeviceErrors turns it into a
// Status.
//
// Thread-safety: functions are reentrant; a DeviceBuffer is a move-only owner, not shared.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"

namespace strata::kernels::cuda {

struct LaunchOptions {
  cudaStream_t stream = nullptr;    // the default stream when null
  uint32_t* error_flags = nullptr;  // optional device word for DeviceError bits
};

enum DeviceError : uint32_t {
  kDeviceErrorBlockId = 1u << 0,     // a block id outside [0, num_blocks)
  kDeviceErrorPosition = 1u << 1,    // a RoPE position outside the table
  kDeviceErrorSequence = 1u << 2,    // inconsistent query_start_loc / seq_lens / max_query_len
  kDeviceErrorPageTokens = 1u << 3,  // a page token count outside [1, block_size]
};

// OK when a CUDA device is usable; kUnavailable with the runtime's reason otherwise.
absl::Status DeviceAvailable();

// kOk for cudaSuccess; otherwise kResourceExhausted (allocation failures) or kInternal, with
// "<what>: <cudaGetErrorString>".
absl::Status CudaStatus(cudaError_t error, std::string_view what);

// Synchronizes `stream`, reads the error word (and clears it): OK when it is zero, otherwise
// kInvalidArgument naming the bits.
absl::Status ReadDeviceErrors(uint32_t* error_flags, cudaStream_t stream);

// Device memory from cudaMalloc, freed on destruction. Allocate at setup time, not per request.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Allocate(size_t size_bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // Synchronous copies (cudaMemcpy) of `size_bytes` from / to host memory at `offset_bytes`.
  absl::Status CopyFromHost(const void* src, size_t size_bytes, size_t offset_bytes = 0);
  absl::Status CopyToHost(void* dst, size_t size_bytes, size_t offset_bytes = 0) const;

 private:
  void* data_ = nullptr;
  size_t size_bytes_ = 0;
};

// Element-wise conversions between fp32 and a float dtype on the device (round to nearest even).
absl::Status CastFromFloat(const float* in, KvDtype dtype, void* out, int64_t count,
                           const LaunchOptions& options = {});
absl::Status CastToFloat(const void* in, KvDtype dtype, float* out, int64_t count,
                         const LaunchOptions& options = {});

}  // namespace strata::kernels::cuda
