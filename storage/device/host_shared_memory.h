// HostRuntime's shareable "device" memory: a memfd mapped MAP_SHARED, whose descriptor is the
// SharedMemoryHandle other processes map (DeviceRuntime::AllocateShareable / OpenShared). Used
// only by HostRuntime.
//
// Thread-safety: the allocations are immutable after creation. Ownership: an allocation owns its
// mapping (and, when it made the memory, the memfd); handles lend the descriptor.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "storage/device/device_runtime.h"

namespace strata::storage::internal_device {

inline constexpr std::string_view kHostBackend = "host";

// A new memfd of `size_bytes` (> 0) named `name`, mapped here. kResourceExhausted when the
// memory cannot be had; errno-derived codes for other failed system calls.
absl::StatusOr<std::unique_ptr<ShareableAllocation>> AllocateHostShareable(uint64_t size_bytes,
                                                                           std::string_view name);

// Maps the memfd `handle` names (which the caller keeps owning). kInvalidArgument for a handle
// of another backend, without a descriptor, of size 0 or larger than the file.
absl::StatusOr<std::unique_ptr<DeviceAllocation>> OpenHostShared(const SharedMemoryHandle& handle);

}  // namespace strata::storage::internal_device
