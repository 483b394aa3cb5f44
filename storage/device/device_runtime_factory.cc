#include "storage/device/device_runtime_factory.h"

#include <string>

#include "fmt/format.h"
#include "storage/device/host_runtime.h"
#include "storage/device/internal/cuda_factory.h"

namespace strata::storage {

absl::StatusOr<DeviceBackend> ParseDeviceBackend(std::string_view name) {
  if (name == "auto") return DeviceBackend::kAuto;
  if (name == "host" || name == "cpu") return DeviceBackend::kHost;
  if (name == "cuda") return DeviceBackend::kCuda;
  return absl::InvalidArgumentError(
      fmt::format("unknown device backend '{}' (auto, host, cpu, cuda)", name));
}

const char* DeviceBackendName(DeviceBackend backend) {
  switch (backend) {
    case DeviceBackend::kAuto:
      return "auto";
    case DeviceBackend::kHost:
      return "host";
    case DeviceBackend::kCuda:
      return "cuda";
  }
  return "unknown";
}

bool CudaRuntimeCompiled() { return internal_device::CudaCompiled(); }

absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateDeviceRuntime(
    const DeviceRuntimeOptions& options) {
  switch (options.backend) {
    case DeviceBackend::kHost:
      return std::make_unique<HostRuntime>();
    case DeviceBackend::kCuda:
      return internal_device::CreateCudaRuntime(options.device_ordinal);
    case DeviceBackend::kAuto: {
      if (internal_device::CudaCompiled()) {
        auto cuda = internal_device::CreateCudaRuntime(options.device_ordinal);
        if (cuda.ok()) return cuda;
      }
      return std::make_unique<HostRuntime>();
    }
  }
  return absl::InvalidArgumentError("unknown device backend");
}

}  // namespace strata::storage
