// The CUDA backend's entry points in builds without CUDA (STRATA_WITH_CUDA=OFF).
#include "storage/device/internal/cuda_factory.h"

namespace strata::storage::internal_device {

bool CudaCompiled() { return false; }

absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateCudaRuntime(int /*device_ordinal*/) {
  return absl::FailedPreconditionError(
      "cuda runtime: this build has no CUDA support (configure with STRATA_WITH_CUDA=ON)");
}

}  // namespace strata::storage::internal_device
