// Test support for the CUDA kernel tests: skip without a device, and copy host data to and from
// device buffers. Test-only.
#pragma once

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device.h"
#include "kernels/testing/test_util.h"

// Skips the current test, with the runtime's reason, when no CUDA device is usable.
#define STRATA_SKIP_WITHOUT_CUDA()                                                   \
  do {                                                                               \
    if (const absl::Status cuda_status = ::strata::kernels::cuda::DeviceAvailable(); \
        !cuda_status.ok()) {                                                         \
      GTEST_SKIP() << cuda_status.message();                                         \
    }                                                                                \
  } while (false)

namespace strata::kernels::cuda::testing {

// A device copy of `size_bytes` bytes at `src` (adds a test failure when CUDA fails).
inline DeviceBuffer ToDevice(const void* src, size_t size_bytes) {
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(size_bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  if (!buffer.ok()) return DeviceBuffer();
  const absl::Status s = buffer->CopyFromHost(src, size_bytes);
  EXPECT_TRUE(s.ok()) << s;
  return *std::move(buffer);
}
template <class T>
DeviceBuffer ToDevice(const std::vector<T>& v) {
  return ToDevice(v.data(), v.size() * sizeof(T));
}
inline DeviceBuffer ToDevice(const kernels::testing::HostTensor& t) {
  return ToDevice(t.data(), static_cast<size_t>(t.size_bytes()));
}

template <class T>
std::vector<T> ToHost(const DeviceBuffer& buffer, size_t count) {
  std::vector<T> out(count);
  const absl::Status s = buffer.CopyToHost(out.data(), count * sizeof(T));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}
inline kernels::testing::HostTensor ToHost(const DeviceBuffer& buffer, KvDtype dtype,
                                           int64_t count) {
  kernels::testing::HostTensor out(dtype, count);
  const absl::Status s = buffer.CopyToHost(out.data(), static_cast<size_t>(out.size_bytes()));
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// A zeroed device word for DeviceError bits.
inline DeviceBuffer ErrorWord() {
  const uint32_t zero = 0;
  return ToDevice(&zero, sizeof(zero));
}

inline void Sync() { ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); }

}  // namespace strata::kernels::cuda::testing
