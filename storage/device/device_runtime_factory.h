// The one place that chooses a DeviceRuntime backend, by configuration and by what this build and
// machine have: CUDA when it was compiled in (STRATA_WITH_CUDA) and a device is present, else the
// host runtime. Thread-safe (a pure function).
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "storage/device/device_runtime.h"

namespace strata::storage {

enum class DeviceBackend {
  kAuto,  // CUDA if this build has it and a device is visible, else host
  kHost,  // memcpy on worker threads
  kCuda,  // CUDA streams; kFailedPrecondition when not built with CUDA or no device is visible
};

// "auto", "host" (also "cpu") or "cuda"; kInvalidArgument for anything else.
absl::StatusOr<DeviceBackend> ParseDeviceBackend(std::string_view name);
const char* DeviceBackendName(DeviceBackend backend);

struct DeviceRuntimeOptions {
  DeviceBackend backend = DeviceBackend::kAuto;
  int device_ordinal = 0;  // CUDA device to use
};

// True when this binary was built with the CUDA runtime.
bool CudaRuntimeCompiled();

// A runtime of the requested backend. kAuto never fails for want of a GPU: it falls back to the
// host runtime. An explicit kCuda fails with kFailedPrecondition saying why (not compiled, no
// device, bad ordinal).
absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateDeviceRuntime(
    const DeviceRuntimeOptions& options);

}  // namespace strata::storage
