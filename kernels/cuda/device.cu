#include <algorithm>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/device.h"
#include "kernels/internal/validate.h"

namespace strata::kernels::cuda {
namespace {

template <class T>
__global__ void CastFromFloatKernel(const float* in, T* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = internal::FromF32<T>(in[i]);
  }
}

template <class T>
__global__ void CastToFloatKernel(const T* in, float* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = internal::ToF32(in[i]);
  }
}

absl::Status CheckCast(const void* in, KvDtype dtype, const void* out, int64_t count) {
  if (in == nullptr || out == nullptr) return kernels::internal::Invalid("cast", "null pointer");
  if (absl::Status s = kernels::internal::CheckFloatDtype(dtype, "cast"); !s.ok()) return s;
  return kernels::internal::CheckCount(count, "cast count");
}

unsigned GridFor(int64_t count) {
  return static_cast<unsigned>(
      std::min<int64_t>(internal::CeilDiv(std::max<int64_t>(count, 1), 256), 65535));
}

}  // namespace

namespace internal {
absl::Status LaunchStatus(std::string_view what) { return CudaStatus(cudaGetLastError(), what); }
}  // namespace internal

absl::Status DeviceAvailable() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a failed runtime initialisation
    return absl::UnavailableError(std::string("no usable CUDA device: ") +
                                  cudaGetErrorString(error));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device present");
  return absl::OkStatus();
}

absl::Status CudaStatus(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message = std::string(what) + ": " + cudaGetErrorString(error);
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

absl::Status ReadDeviceErrors(uint32_t* error_flags, cudaStream_t stream) {
  if (error_flags == nullptr) return kernels::internal::Invalid("error flags", "null pointer");
  uint32_t flags = 0;
  if (absl::Status s = CudaStatus(cudaStreamSynchronize(stream), "sync"); !s.ok()) return s;
  if (absl::Status s = CudaStatus(
          cudaMemcpy(&flags, error_flags, sizeof(flags), cudaMemcpyDeviceToHost), "read flags");
      !s.ok()) {
    return s;
  }
  if (flags == 0) return absl::OkStatus();
  if (absl::Status s = CudaStatus(cudaMemset(error_flags, 0, sizeof(uint32_t)), "clear flags");
      !s.ok()) {
    return s;
  }
  std::string message = "device-side metadata check failed (flags " + std::to_string(flags) + "):";
  if (flags & kDeviceErrorBlockId) message += " block id out of range;";
  if (flags & kDeviceErrorPosition) message += " position outside the RoPE table;";
  if (flags & kDeviceErrorSequence) message += " inconsistent sequence metadata;";
  if (flags & kDeviceErrorPageTokens) message += " page token count out of range;";
  return absl::InvalidArgumentError(message);
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t size_bytes) {
  DeviceBuffer buffer;
  if (size_bytes == 0) return buffer;
  if (absl::Status s = CudaStatus(cudaMalloc(&buffer.data_, size_bytes), "cudaMalloc"); !s.ok()) {
    return s;
  }
  buffer.size_bytes_ = size_bytes;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(other.data_), size_bytes_(other.size_bytes_) {
  other.data_ = nullptr;
  other.size_bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = other.data_;
    size_bytes_ = other.size_bytes_;
    other.data_ = nullptr;
    other.size_bytes_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

absl::Status DeviceBuffer::CopyFromHost(const void* src, size_t size_bytes, size_t offset_bytes) {
  if (offset_bytes > size_bytes_ || size_bytes > size_bytes_ - offset_bytes) {
    return kernels::internal::Invalid("device copy", "range outside the buffer");
  }
  if (size_bytes == 0) return absl::OkStatus();
  return CudaStatus(
      cudaMemcpy(static_cast<char*>(data_) + offset_bytes, src, size_bytes, cudaMemcpyHostToDevice),
      "copy to device");
}

absl::Status DeviceBuffer::CopyToHost(void* dst, size_t size_bytes, size_t offset_bytes) const {
  if (offset_bytes > size_bytes_ || size_bytes > size_bytes_ - offset_bytes) {
    return kernels::internal::Invalid("device copy", "range outside the buffer");
  }
  if (size_bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpy(dst, static_cast<const char*>(data_) + offset_bytes, size_bytes,
                               cudaMemcpyDeviceToHost),
                    "copy to host");
}

absl::Status CastFromFloat(const float* in, KvDtype dtype, void* out, int64_t count,
                           const LaunchOptions& options) {
  if (absl::Status s = CheckCast(in, dtype, out, count); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  internal::DispatchDtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    CastFromFloatKernel<T>
        <<<GridFor(count), 256, 0, options.stream>>>(in, static_cast<T*>(out), count);
  });
  return internal::LaunchStatus("cast from float");
}

absl::Status CastToFloat(const void* in, KvDtype dtype, float* out, int64_t count,
                         const LaunchOptions& options) {
  if (absl::Status s = CheckCast(in, dtype, out, count); !s.ok()) return s;
  if (count == 0) return absl::OkStatus();
  internal::DispatchDtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    CastToFloatKernel<T>
        <<<GridFor(count), 256, 0, options.stream>>>(static_cast<const T*>(in), out, count);
  });
  return internal::LaunchStatus("cast to float");
}

}  // namespace strata::kernels::cuda
