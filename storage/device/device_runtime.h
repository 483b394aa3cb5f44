// DeviceRuntime is the seam through which Strata moves bytes between host memory (the shared
// arena) and wherever an engine keeps its KV (GPU memory, or host memory for CPU engines and
// tests): capabilities, streams of asynchronous copy batches (and decodes of compressed chunks'
// layers, storage/codec), events to wait on, allocations and host-memory registration. CudaRuntime
// (storage/device/cuda_runtime.h, built when CUDA is on) runs copies with cudaMemcpyAsync on CUDA
// streams; HostRuntime (storage/device/host_runtime.h) runs them with memcpy on one worker thread
// per stream, so all logic runs and is tested without a GPU. Shareable allocations (the daemon's
// device pool, T0) are what other processes map: CUDA IPC handles on a GPU, memfd "device" memory
// on HostRuntime. Backends are chosen in one place: CreateDeviceRuntime (device_runtime_factory.h).
//
// Execution model (the same for every backend, modelled on CUDA streams):
//   - Work enqueued on one DeviceStream (Copy, DecodeLayers, Record, WaitForEvent,
//     WaitForExternal) runs in enqueue order, asynchronously to the caller. Different streams
//     run concurrently.
//   - A DeviceEvent recorded on a stream completes when all work enqueued on that stream before
//     the Record has completed. An event that was never recorded is complete. Re-recording an
//     event moves it to the new point; Wait and Query look at the latest Record.
//   - A copy that fails puts its stream in error: every event recorded on that stream afterwards
//     completes with that error (Wait / Query return it) until Synchronize() returns it and
//     clears it. Copies are never retried.
//
// Thread-safety: DeviceRuntime methods are thread-safe. A DeviceStream and a DeviceEvent may be
// used from any thread, but not by two threads at once. Events and streams must be used only with
// the runtime that created them (kInvalidArgument otherwise).
//
// Ownership: the runtime must outlive every stream, event and allocation it created. Memory named
// by an enqueued copy must stay valid until an event recorded after the copy has completed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "storage/codec/codec.h"
#include "storage/device/copy_digests.h"

namespace strata::storage {

enum class MemoryKind : uint8_t {
  kHost = 1,    // memory the CPU addresses (pageable, or pinned when the backend has it)
  kDevice = 2,  // accelerator memory (HostRuntime: host memory standing in for it)
};

struct DeviceCapabilities {
  std::string backend;      // "host" or "cuda"
  std::string device_name;  // e.g. "NVIDIA H100 80GB HBM3", or "cpu"
  int device_ordinal = -1;  // -1 for the host backend
  uint64_t device_memory_bytes = 0;
  // Copies may name memory the CPU cannot address (device memory).
  bool device_memory = false;
  // Several runs of one Copy call are submitted to the driver as one batch.
  bool batched_copies = false;
  // RegisterHostMemory makes later copies from and to that range DMA (page-locked memory).
  bool host_registration = false;
  // DeviceStream::CopyDigested works (the CPU copies, so it can digest what it reads).
  bool digested_copies = false;
  // Codecs whose device decodes failed the runtime's start-up check (decode_check.h), each with
  // why: DecodesOnDevice denies them, so the daemon decodes those chunks instead.
  std::vector<std::string> decode_check_failures;
};

// One contiguous copy of `size_bytes` from `src` to `dst`. Each side may be host or device
// memory; the backend infers the direction (unified addressing). Ranges must not overlap.
struct CopyRun {
  const void* src = nullptr;
  void* dst = nullptr;
  uint64_t size_bytes = 0;
};

// One layer of a codec's encoded frame to decode on a stream (DeviceStream::DecodeLayers): what
// Codec::DecodeLayer(*layout, {frame, frame_bytes}, layer, {out, out_bytes}) computes, on the
// stream's device. Everything it points to must stay valid, and the frame unchanged, until an
// event recorded after it has completed; *failure is written only when the decode fails, and
// may be read once such an event has completed.
struct DecodeLayerOp {
  const Codec* codec = nullptr;
  const KvLayout* layout = nullptr;
  const std::byte* frame = nullptr;  // 4-byte aligned
  uint64_t frame_bytes = 0;
  // The frame's first bytes, in host memory: its header and layer table
  // (EncodedFrameOverheadBytes(layout->num_layers), or the whole frame when it is shorter). A
  // runtime whose device the host cannot read plans the decode from them (EncodedChunk::
  // ParseHead); the host runtime reads the frame itself and ignores them.
  std::span<const std::byte> frame_head;
  uint32_t layer = 0;
  std::byte* out = nullptr;  // layout->layer_bytes(the frame's tokens) bytes
  uint64_t out_bytes = 0;
  absl::Status* failure = nullptr;
};

// A stream of the engine's own (CUDA: a cudaStream_t's value, e.g. torch's
// current_stream().cuda_stream; 0 is the legacy default stream).
using ExternalStream = uintptr_t;

class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  // Blocks until the event completes. OK, or the error of the stream it was recorded on.
  virtual absl::Status Wait() = 0;
  // True when complete (Wait would not block); the stream's error when it completed with one.
  virtual absl::StatusOr<bool> Query() = 0;
};

class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  // Enqueues the runs in order; returns once they are enqueued (the span is not kept).
  // kInvalidArgument for a run with a null pointer (nothing is enqueued then).
  virtual absl::Status Copy(std::span<const CopyRun> runs) = 0;
  // Like Copy, and folds each run's source bytes, as they are copied, into the digest
  // `digests[digest_of[i]]` (digest_of has one entry per run); a run whose dst is null is only
  // folded, not copied. Runs are folded in the order given, so after this call's work completes
  // a digest is the xxh3-64 of its runs' source bytes concatenated (when every earlier call
  // that fed it has completed too). `digests` must outlive that work. kInvalidArgument for
  // mismatched spans, a digest index out of range or a run with a null source;
  // kUnimplemented when Capabilities().digested_copies is false.
  virtual absl::Status CopyDigested(std::span<const CopyRun> runs,
                                    std::span<const uint32_t> digest_of, CopyDigests& digests) {
    (void)runs, (void)digest_of, (void)digests;
    return absl::UnimplementedError("this device runtime cannot digest copies");
  }
  // Enqueues the decodes of layers of encoded frames (storage/codec) held in memory this
  // stream's copies reach (DecodeLayerOp), in stream order with the copies around them; the ops
  // of one call may run concurrently, so their outputs must not overlap. A decode that fails
  // (the frame is not the codec's, or its layer's section checksum fails: the host runtime reads
  // it; CUDA, which cannot read the sections from the host, relies on the frame's own checksum,
  // which its caller checks) writes its error to *op.failure,
  // leaves op.out holding unspecified bytes, and does not put the stream in error: one bad
  // chunk fails only itself. kInvalidArgument for null pointers or sizes that do not match the
  // layout (nothing is enqueued); kUnimplemented when the runtime cannot decode a codec
  // (DeviceRuntime::DecodesOnDevice).
  virtual absl::Status DecodeLayers(std::span<const DecodeLayerOp> ops) {
    (void)ops;
    return absl::UnimplementedError("this device runtime decodes no codec");
  }
  // The kInvalidArgument DecodeLayers answers for ops with null pointers, a layer outside the
  // layout, or an output of no bytes or more than a layer's; OK otherwise. `stream` names the
  // stream in the message.
  static absl::Status CheckDecodeLayerOps(std::span<const DecodeLayerOp> ops,
                                          std::string_view stream);
  // Records `event` at the current end of the stream.
  virtual absl::Status Record(DeviceEvent& event) = 0;
  // Work enqueued after this call starts only once `event` (as last recorded) has completed.
  virtual absl::Status WaitForEvent(DeviceEvent& event) = 0;
  // Work enqueued after this call starts only once the work enqueued on the engine's stream
  // `external` so far has completed. HostRuntime: a no-op, because CPU engines do their work
  // synchronously on the calling thread.
  virtual absl::Status WaitForExternal(ExternalStream external) = 0;
  // Blocks until everything enqueued so far has run. Returns the stream's error, if any, and
  // clears it.
  virtual absl::Status Synchronize() = 0;
};

// Memory allocated by a runtime; freed on destruction. An allocation opened from another
// process's SharedMemoryHandle unmaps that process's memory here instead (the memory itself lives
// until its allocator frees it and every process has unmapped it).
class DeviceAllocation {
 public:
  virtual ~DeviceAllocation() = default;
  virtual void* data() const = 0;
  virtual uint64_t size_bytes() const = 0;
  virtual MemoryKind kind() const = 0;
};

// What another process needs to map a ShareableAllocation: the backend that made it, its size,
// and either a descriptor (HostRuntime: a memfd) or an IPC handle (CudaRuntime:
// cudaIpcMemHandle_t's bytes). The descriptor is the allocation's: dup it to send it (SCM_RIGHTS);
// the receiver owns the copy it gets and may close it once OpenShared has mapped it.
struct SharedMemoryHandle {
  static constexpr size_t kIpcBytes = 64;
  std::string backend;
  uint64_t size_bytes = 0;
  int fd = -1;
  std::array<std::byte, kIpcBytes> ipc{};
};

// Device memory that other processes may map (DeviceRuntime::OpenShared with handle()).
class ShareableAllocation : public DeviceAllocation {
 public:
  virtual SharedMemoryHandle handle() const = 0;
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  virtual const DeviceCapabilities& Capabilities() const = 0;

  // A new stream; `name` is for logs and thread names.
  virtual absl::StatusOr<std::unique_ptr<DeviceStream>> CreateStream(std::string_view name) = 0;
  virtual absl::StatusOr<std::unique_ptr<DeviceEvent>> CreateEvent() = 0;

  // Whether DeviceStream::DecodeLayers decodes frames of `codec` on this runtime's device: the
  // host runtime runs every codec's own decoder (the device is the CPU); a GPU runtime, the
  // codecs it has kernels for (CUDA: the quantizing codecs, once its kernels have decoded a
  // test frame of each bit for bit as the CPU does).
  virtual bool DecodesOnDevice(CodecId codec) const {
    (void)codec;
    return false;
  }

  // `size_bytes` (> 0) of `kind` memory, aligned to at least 256 bytes, contents unspecified.
  // kResourceExhausted when the memory is not there.
  virtual absl::StatusOr<std::unique_ptr<DeviceAllocation>> Allocate(uint64_t size_bytes,
                                                                     MemoryKind kind) = 0;

  // `size_bytes` (> 0) of device memory that other processes can map (T0, the daemon's device
  // pool): HostRuntime backs it with a memfd named `name`, CudaRuntime exports it with
  // cudaIpcGetMemHandle. Contents unspecified. kInvalidArgument for 0 bytes; kResourceExhausted
  // when the memory is not there.
  virtual absl::StatusOr<std::unique_ptr<ShareableAllocation>> AllocateShareable(
      uint64_t size_bytes, std::string_view name) = 0;
  // Maps, in this process, memory another process allocated with AllocateShareable. The mapping
  // covers handle.size_bytes and lives as long as the returned allocation. kInvalidArgument for a
  // handle of another backend, without its descriptor or IPC bytes, or larger than the memory it
  // names; the backend's errors otherwise (CUDA cannot open a handle in the process that made it).
  virtual absl::StatusOr<std::unique_ptr<DeviceAllocation>> OpenShared(
      const SharedMemoryHandle& handle) = 0;

  // Tells the backend that [base, base + size_bytes) of host memory (for example the mapped
  // shared arena) will be copied from and to, so it can page-lock it for DMA. Must be undone
  // with UnregisterHostMemory(base) before the memory is unmapped. kInvalidArgument for a null
  // or empty range or one that overlaps a registered range.
  virtual absl::Status RegisterHostMemory(void* base, uint64_t size_bytes) = 0;
  // kInvalidArgument when `base` was not registered.
  virtual absl::Status UnregisterHostMemory(void* base) = 0;
};

}  // namespace strata::storage
