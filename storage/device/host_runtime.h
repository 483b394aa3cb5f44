// HostRuntime is the CPU DeviceRuntime: copies are memcpy on a worker thread per stream (with
// helper threads for large batches), so copies enqueued for layer i+1 run while the caller
// consumes layer i, exactly as with CUDA streams. "Device" memory is host memory; shareable
// "device" memory is a memfd whose descriptor is the handle (host_shared_memory.h). A stream's
// DecodeLayers runs the codec's own (CPU) decoder on the stream's thread and its helpers, so it
// decodes every codec. Used by CPU
// engines and by every test that must run without a GPU; the copy hook injects delays and failures
// (the fault-injecting wrapper of STYLE.md's seam table).
//
// Thread-safety and ownership as DeviceRuntime says. Each stream owns a named std::jthread
// ("strata-<name>") and copy_threads - 1 helpers (copies and decodes), stopped and joined when the
// stream is destroyed; work still queued then is run first, so the memory it names must stay valid
// until the stream is gone.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "storage/device/device_runtime.h"

namespace strata::storage {

// Copy threads per stream when not configured: a few, on machines with cores to spare.
size_t DefaultHostCopyThreads();

struct HostRuntimeOptions {
  // Threads that copy one large batch (8 MiB or more) together, the stream's own included, with
  // non-temporal stores (streaming_copy.h); smaller batches, and every batch when copy_hook is
  // set, are copied with memcpy by the stream's thread alone, run by run in order. The same
  // threads run the decodes of one DecodeLayers call side by side.
  size_t copy_threads = DefaultHostCopyThreads();
  // Called on the stream's thread before each run is copied; a non-OK status fails the copy
  // (the run and the rest of its Copy call are skipped, the stream goes into error). May sleep
  // to simulate a slow device. Null: no hook.
  std::function<absl::Status(const CopyRun&)> copy_hook;
};

class HostRuntime final : public DeviceRuntime {
 public:
  explicit HostRuntime(HostRuntimeOptions options = {});
  ~HostRuntime() override;

  const DeviceCapabilities& Capabilities() const override { return capabilities_; }
  bool DecodesOnDevice(CodecId /*codec*/) const override { return true; }
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

  // Registered ranges, base -> size (for tests of registration hooks).
  std::map<const void*, uint64_t> RegisteredHostMemory() const;

 private:
  const HostRuntimeOptions options_;
  DeviceCapabilities capabilities_;
  mutable absl::Mutex mu_;
  std::map<const void*, uint64_t> registered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage
