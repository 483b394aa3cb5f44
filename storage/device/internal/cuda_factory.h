// Entry point of the CUDA backend for the factory. Defined by cuda_runtime.cc when the build has
// CUDA, and by cuda_runtime_unavailable.cc otherwise, so that no code outside
// storage/device/cuda_* depends on whether CUDA was compiled in. Thread-safe.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "storage/device/device_runtime.h"

namespace strata::storage::internal_device {

// True in builds that compiled cuda_runtime.cc.
bool CudaCompiled();

// A CudaRuntime on `device_ordinal`. kFailedPrecondition when CUDA is not compiled in or the
// device is not there.
absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateCudaRuntime(int device_ordinal);

}  // namespace strata::storage::internal_device
