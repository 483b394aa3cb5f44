#include "storage/device/cuda_runtime.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "storage/device/cuda_frame_decoder.h"
#include "storage/device/decode_check.h"
#include "storage/device/internal/cuda_factory.h"

namespace strata::storage {
namespace {

absl::Status CudaStatus(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message = fmt::format("cuda runtime: {}: {} ({})", what,
                                          cudaGetErrorString(error), cudaGetErrorName(error));
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidMemcpyDirection:
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
      return absl::InvalidArgumentError(message);
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

#define STRATA_CUDA_RETURN_IF_ERROR(call, what)         \
  do {                                                  \
    const cudaError_t strata_cuda_error_ = (call);      \
    if (strata_cuda_error_ != cudaSuccess) [[unlikely]] \
      return CudaStatus(strata_cuda_error_, (what));    \
  } while (false)

class CudaEvent final : public DeviceEvent {
 public:
  CudaEvent(int device, cudaEvent_t event) : device_(device), event_(event) {}
  ~CudaEvent() override {
    cudaSetDevice(device_);
    cudaEventDestroy(event_);
  }

  absl::Status Wait() override {
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "set device");
    return CudaStatus(cudaEventSynchronize(event_), "event synchronize");
  }

  absl::StatusOr<bool> Query() override {
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "set device");
    const cudaError_t error = cudaEventQuery(event_);
    if (error == cudaSuccess) return true;
    if (error == cudaErrorNotReady) return false;
    return CudaStatus(error, "event query");
  }

  cudaEvent_t get() const { return event_; }

 private:
  const int device_;
  const cudaEvent_t event_;
};

class CudaStream final : public DeviceStream {
 public:
  CudaStream(int device, cudaStream_t stream, cudaEvent_t scratch, std::string name,
             CodecSet decodes)
      : device_(device),
        stream_(stream),
        scratch_(scratch),
        name_(std::move(name)),
        decoder_(stream, decodes) {}
  ~CudaStream() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaEventDestroy(scratch_);
    cudaStreamDestroy(stream_);
  }

  absl::Status Copy(std::span<const CopyRun> runs) override {
    for (const CopyRun& run : runs) {
      if (run.size_bytes > 0 && (run.src == nullptr || run.dst == nullptr)) {
        return absl::InvalidArgumentError(
            fmt::format("cuda stream {}: copy run with a null pointer", name_));
      }
    }
    if (runs.empty()) return absl::OkStatus();
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "set device");
    absl::Status status = Submit(runs);
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = status;
    }
    return status;
  }

  absl::Status DecodeLayers(std::span<const DecodeLayerOp> ops) override {
    STRATA_RETURN_IF_ERROR(CheckDecodeLayerOps(ops, fmt::format("cuda stream {}", name_)));
    if (ops.empty()) return absl::OkStatus();
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "set device");
    absl::Status status = decoder_.Enqueue(ops);
    if (!status.ok() && !absl::IsUnimplemented(status)) {  // a launch failed: the stream's error
      absl::MutexLock lock(&mu_);
      if (error_.ok()) error_ = status;
    }
    return status;
  }

  absl::Status Record(DeviceEvent& event) override {
    auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
    if (cuda_event == nullptr) {
      return absl::InvalidArgumentError("cuda stream: event of another runtime");
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "set device");
    return CudaStatus(cudaEventRecord(cuda_event->get(), stream_), "event record");
  }

  absl::Status WaitForEvent(DeviceEvent& event) override {
    auto* cuda_event = dynamic_cast<CudaEvent*>(&event);
    if (cuda_event == nullptr) {
      return absl::InvalidArgumentError("cuda stream: event of another runtime");
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "set device");
    return CudaStatus(cudaStreamWaitEvent(stream_, cuda_event->get(), 0), "stream wait event");
  }

  absl::Status WaitForExternal(ExternalStream external) override {
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "set device");
    auto* other = reinterpret_cast<cudaStream_t>(external);
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(scratch_, other), "record on engine stream");
    return CudaStatus(cudaStreamWaitEvent(stream_, scratch_, 0), "wait for engine stream");
  }

  absl::Status Synchronize() override {
    STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "set device");
    absl::Status status = CudaStatus(cudaStreamSynchronize(stream_), "stream synchronize");
    absl::MutexLock lock(&mu_);
    absl::Status earlier = std::exchange(error_, absl::OkStatus());
    return earlier.ok() ? status : earlier;
  }

 private:
  absl::Status Submit(std::span<const CopyRun> runs) {
#if CUDART_VERSION >= 13000
    if (runs.size() > 1) {
      dsts_.clear();
      srcs_.clear();
      sizes_.clear();
      for (const CopyRun& run : runs) {
        if (run.size_bytes == 0) continue;
        dsts_.push_back(run.dst);
        srcs_.push_back(const_cast<void*>(run.src));
        sizes_.push_back(run.size_bytes);
      }
      if (dsts_.empty()) return absl::OkStatus();
      cudaMemcpyAttributes attributes{};
      attributes.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
      size_t attribute_index = 0;
      return CudaStatus(
          cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(), dsts_.size(), &attributes,
                               &attribute_index, 1, stream_),
          "memcpy batch");
    }
#endif
    for (const CopyRun& run : runs) {
      if (run.size_bytes == 0) continue;
      STRATA_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(run.dst, run.src, run.size_bytes, cudaMemcpyDefault, stream_),
          "memcpy async");
    }
    return absl::OkStatus();
  }

  const int device_;
  const cudaStream_t stream_;
  const cudaEvent_t scratch_;  // recorded on engine streams by WaitForExternal
  const std::string name_;
  // Reused argument arrays of cudaMemcpyBatchAsync (the stream is used by one thread at a time).
  std::vector<void*> dsts_;
  std::vector<void*> srcs_;
  std::vector<size_t> sizes_;
  CudaFrameDecoder decoder_;  // freed after the destructor's synchronize
  absl::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // a failed submission, until Synchronize
};

class CudaAllocation final : public DeviceAllocation {
 public:
  CudaAllocation(int device, void* data, uint64_t size_bytes, MemoryKind kind)
      : device_(device), data_(data), size_bytes_(size_bytes), kind_(kind) {}
  ~CudaAllocation() override {
    cudaSetDevice(device_);
    if (kind_ == MemoryKind::kDevice) {
      cudaFree(data_);
    } else {
      cudaFreeHost(data_);
    }
  }
  void* data() const override { return data_; }
  uint64_t size_bytes() const override { return size_bytes_; }
  MemoryKind kind() const override { return kind_; }

 private:
  const int device_;
  void* const data_;
  const uint64_t size_bytes_;
  const MemoryKind kind_;
};

// cudaMalloc'd memory with its IPC handle.
class CudaShareableAllocation final : public ShareableAllocation {
 public:
  CudaShareableAllocation(int device, void* data, uint64_t size_bytes,
                          const cudaIpcMemHandle_t& ipc)
      : device_(device), data_(data), size_bytes_(size_bytes), ipc_(ipc) {}
  ~CudaShareableAllocation() override {
    cudaSetDevice(device_);
    cudaFree(data_);
  }
  void* data() const override { return data_; }
  uint64_t size_bytes() const override { return size_bytes_; }
  MemoryKind kind() const override { return MemoryKind::kDevice; }
  SharedMemoryHandle handle() const override {
    SharedMemoryHandle handle;
    handle.backend = "cuda";
    handle.size_bytes = size_bytes_;
    std::memcpy(handle.ipc.data(), &ipc_, sizeof(ipc_));
    return handle;
  }

 private:
  const int device_;
  void* const data_;
  const uint64_t size_bytes_;
  const cudaIpcMemHandle_t ipc_;
};

// Another process's memory opened from its IPC handle.
class CudaIpcMapping final : public DeviceAllocation {
 public:
  CudaIpcMapping(int device, void* data, uint64_t size_bytes)
      : device_(device), data_(data), size_bytes_(size_bytes) {}
  ~CudaIpcMapping() override {
    cudaSetDevice(device_);
    cudaIpcCloseMemHandle(data_);
  }
  void* data() const override { return data_; }
  uint64_t size_bytes() const override { return size_bytes_; }
  MemoryKind kind() const override { return MemoryKind::kDevice; }

 private:
  const int device_;
  void* const data_;
  const uint64_t size_bytes_;
};

static_assert(sizeof(cudaIpcMemHandle_t) <= SharedMemoryHandle::kIpcBytes);

}  // namespace

absl::StatusOr<std::unique_ptr<CudaRuntime>> CudaRuntime::Create(
    const CudaRuntimeOptions& options) {
  int count = 0;
  const cudaError_t count_error = cudaGetDeviceCount(&count);
  if (count_error != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return absl::FailedPreconditionError(
        fmt::format("cuda runtime: no usable CUDA device: {}", cudaGetErrorString(count_error)));
  }
  if (options.device_ordinal < 0 || options.device_ordinal >= count) {
    return absl::FailedPreconditionError(fmt::format(
        "cuda runtime: device {} requested, {} visible", options.device_ordinal, count));
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device_ordinal), "set device");
  cudaDeviceProp properties{};
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, options.device_ordinal),
                              "device properties");
  DeviceCapabilities capabilities;
  capabilities.backend = "cuda";
  capabilities.device_name = properties.name;
  capabilities.device_ordinal = options.device_ordinal;
  capabilities.device_memory_bytes = properties.totalGlobalMem;
  capabilities.device_memory = true;
  capabilities.batched_copies = CUDART_VERSION >= 13000;
  capabilities.host_registration = true;
  std::unique_ptr<CudaRuntime> runtime(
      new CudaRuntime(options.device_ordinal, std::move(capabilities)));
  // The check's streams decode every candidate; the runtime then offers those that passed.
  const std::vector<const Codec*> candidates = CudaDecodableCodecs();
  for (const Codec* codec : candidates) {
    runtime->device_decodes_.Add(static_cast<uint32_t>(codec->id()));
  }
  runtime->device_decodes_ =
      CheckDeviceDecodes(*runtime, candidates, &runtime->capabilities_.decode_check_failures);
  return runtime;
}

CudaRuntime::CudaRuntime(int device_ordinal, DeviceCapabilities capabilities)
    : device_ordinal_(device_ordinal), capabilities_(std::move(capabilities)) {}

CudaRuntime::~CudaRuntime() {
  absl::MutexLock lock(&mu_);
  cudaSetDevice(device_ordinal_);
  for (const auto& [base, size] : registered_) cudaHostUnregister(const_cast<void*>(base));
}

absl::StatusOr<std::unique_ptr<DeviceStream>> CudaRuntime::CreateStream(std::string_view name) {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_ordinal_), "set device");
  cudaStream_t stream = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                              "stream create");
  cudaEvent_t scratch = nullptr;
  const cudaError_t event_error = cudaEventCreateWithFlags(&scratch, cudaEventDisableTiming);
  if (event_error != cudaSuccess) {
    cudaStreamDestroy(stream);
    return CudaStatus(event_error, "event create");
  }
  return std::make_unique<CudaStream>(device_ordinal_, stream, scratch, std::string(name),
                                      device_decodes_);
}

absl::StatusOr<std::unique_ptr<DeviceEvent>> CudaRuntime::CreateEvent() {
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_ordinal_), "set device");
  cudaEvent_t event = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                              "event create");
  return std::make_unique<CudaEvent>(device_ordinal_, event);
}

absl::StatusOr<std::unique_ptr<DeviceAllocation>> CudaRuntime::Allocate(uint64_t size_bytes,
                                                                        MemoryKind kind) {
  if (size_bytes == 0) return absl::InvalidArgumentError("cuda runtime: allocation of 0 bytes");
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_ordinal_), "set device");
  void* data = nullptr;
  if (kind == MemoryKind::kDevice) {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMalloc(&data, size_bytes),
                                fmt::format("allocate {} device bytes", size_bytes));
  } else {
    STRATA_CUDA_RETURN_IF_ERROR(cudaMallocHost(&data, size_bytes),
                                fmt::format("allocate {} pinned host bytes", size_bytes));
  }
  return std::make_unique<CudaAllocation>(device_ordinal_, data, size_bytes, kind);
}

absl::StatusOr<std::unique_ptr<ShareableAllocation>> CudaRuntime::AllocateShareable(
    uint64_t size_bytes, std::string_view name) {
  if (size_bytes == 0) {
    return absl::InvalidArgumentError(
        fmt::format("cuda runtime: shareable allocation '{}' of 0 bytes", name));
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_ordinal_), "set device");
  void* data = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(
      cudaMalloc(&data, size_bytes),
      fmt::format("allocate {} shareable device bytes for '{}'", size_bytes, name));
  cudaIpcMemHandle_t ipc{};
  const cudaError_t error = cudaIpcGetMemHandle(&ipc, data);
  if (error != cudaSuccess) {
    cudaFree(data);
    return CudaStatus(error, fmt::format("IPC handle of '{}'", name));
  }
  return std::make_unique<CudaShareableAllocation>(device_ordinal_, data, size_bytes, ipc);
}

absl::StatusOr<std::unique_ptr<DeviceAllocation>> CudaRuntime::OpenShared(
    const SharedMemoryHandle& handle) {
  if (handle.backend != "cuda") {
    return absl::InvalidArgumentError(fmt::format(
        "cuda runtime: cannot open a '{}' runtime's shared memory handle", handle.backend));
  }
  if (handle.size_bytes == 0) {
    return absl::InvalidArgumentError("cuda runtime: shared memory handle of 0 bytes");
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_ordinal_), "set device");
  cudaIpcMemHandle_t ipc{};
  std::memcpy(&ipc, handle.ipc.data(), sizeof(ipc));
  void* data = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(cudaIpcOpenMemHandle(&data, ipc, cudaIpcMemLazyEnablePeerAccess),
                              fmt::format("open an IPC handle of {} bytes", handle.size_bytes));
  return std::make_unique<CudaIpcMapping>(device_ordinal_, data, handle.size_bytes);
}

absl::Status CudaRuntime::RegisterHostMemory(void* base, uint64_t size_bytes) {
  if (base == nullptr || size_bytes == 0) {
    return absl::InvalidArgumentError("cuda runtime: register of a null or empty range");
  }
  const auto* begin = static_cast<const std::byte*>(base);
  absl::MutexLock lock(&mu_);
  for (const auto& [other, other_size] : registered_) {
    const auto* other_begin = static_cast<const std::byte*>(other);
    if (begin < other_begin + other_size && other_begin < begin + size_bytes) {
      return absl::InvalidArgumentError("cuda runtime: range overlaps a registered range");
    }
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_ordinal_), "set device");
  STRATA_CUDA_RETURN_IF_ERROR(cudaHostRegister(base, size_bytes, cudaHostRegisterPortable),
                              fmt::format("host register {} bytes", size_bytes));
  registered_.emplace(base, size_bytes);
  return absl::OkStatus();
}

absl::Status CudaRuntime::UnregisterHostMemory(void* base) {
  absl::MutexLock lock(&mu_);
  if (registered_.erase(base) == 0) {
    return absl::InvalidArgumentError("cuda runtime: unregister of an unregistered range");
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_ordinal_), "set device");
  return CudaStatus(cudaHostUnregister(base), "host unregister");
}

namespace internal_device {

bool CudaCompiled() { return true; }

absl::StatusOr<std::unique_ptr<DeviceRuntime>> CreateCudaRuntime(int device_ordinal) {
  auto runtime = CudaRuntime::Create({.device_ordinal = device_ordinal});
  if (!runtime.ok()) return runtime.status();
  return std::unique_ptr<DeviceRuntime>(std::move(*runtime));
}

}  // namespace internal_device
}  // namespace strata::storage
