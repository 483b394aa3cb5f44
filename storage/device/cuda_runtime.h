// CudaRuntime is the CUDA DeviceRuntime: streams are non-blocking cudaStream_t, events are
// cudaEvent_t (timing disabled), copies are cudaMemcpyBatchAsync where the toolkit has it (CUDA 13)
// and a loop of cudaMemcpyAsync (cudaMemcpyDefault, unified addressing) otherwise; host memory
// registration is cudaHostRegister, so copies from and to the mapped shared arena are DMA;
// shareable allocations are cudaMalloc'd memory exported with cudaIpcGetMemHandle and opened with
// cudaIpcOpenMemHandle. DecodeLayers runs CudaFrameDecoder (cuda_frame_decoder.h) for the codecs
// whose decodes passed Create's check (CheckDeviceDecodes: bit for bit the CPU's on this device);
// the others DecodesOnDevice denies, and Capabilities().decode_check_failures says why.
// Compiled only when STRATA_WITH_CUDA is on; other code reaches it through
// CreateDeviceRuntime (device_runtime_factory.h). This header includes no CUDA header.
//
// Thread-safety and ownership as DeviceRuntime says. Every call first makes the runtime's device
// current on the calling thread.
#pragma once

#include <map>
#include <memory>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/stored_encoding.h"
#include "storage/device/device_runtime.h"

namespace strata::storage {

struct CudaRuntimeOptions {
  int device_ordinal = 0;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  // kFailedPrecondition when no CUDA device is visible or the ordinal is out of range (the
  // message carries the driver's reason).
  static absl::StatusOr<std::unique_ptr<CudaRuntime>> Create(const CudaRuntimeOptions& options);
  ~CudaRuntime() override;

  const DeviceCapabilities& Capabilities() const override { return capabilities_; }
  absl::StatusOr<std::unique_ptr<DeviceStream>> CreateStream(std::string_view name) override;
  absl::StatusOr<std::unique_ptr<DeviceEvent>> CreateEvent() override;
  absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(uint64_t size_bytes,
                                                             MemoryKind kind) override;
  absl::StatusOr<std::unique_ptr<ShareableAllocation>> AllocateShareable(
      uint64_t size_bytes, std::string_view name) override;
  absl::StatusOr<std::unique_ptr<DeviceAllocation>> OpenShared(
      const SharedMemoryHandle& handle) override;
  absl::Status RegisterHostMemory(void* base, uint64_t size_bytes) override;
  absl::Status UnregisterHostMemory(void* base) override;
  bool DecodesOnDevice(CodecId codec) const override {
    return device_decodes_.Contains(static_cast<uint32_t>(codec));
  }

 private:
  CudaRuntime(int device_ordinal, DeviceCapabilities capabilities);

  const int device_ordinal_;
  DeviceCapabilities capabilities_;  // set by Create, then constant
  CodecSet device_decodes_;          // set by Create, then constant
  absl::Mutex mu_;
  std::map<const void*, uint64_t> registered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage
