#include "storage/device/host_shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

#include "core/scoped_fd.h"
#include "core/status_util.h"
#include "fmt/format.h"

namespace strata::storage::internal_device {
namespace {

// A MAP_SHARED mapping of a memfd; the memfd too when this process made it.
class HostSharedMapping final : public ShareableAllocation {
 public:
  HostSharedMapping(ScopedFd fd, void* data, uint64_t size_bytes)
      : fd_(std::move(fd)), data_(data), size_bytes_(size_bytes) {}
  ~HostSharedMapping() override { ::munmap(data_, size_bytes_); }

  void* data() const override { return data_; }
  uint64_t size_bytes() const override { return size_bytes_; }
  MemoryKind kind() const override { return MemoryKind::kDevice; }
  SharedMemoryHandle handle() const override {
    SharedMemoryHandle handle;
    handle.backend = std::string(kHostBackend);
    handle.size_bytes = size_bytes_;
    handle.fd = fd_.get();
    return handle;
  }

 private:
  const ScopedFd fd_;  // invalid for a mapping opened from another process's handle
  void* const data_;
  const uint64_t size_bytes_;
};

absl::StatusOr<void*> MapShared(int fd, uint64_t size_bytes, std::string_view what) {
  void* data = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return ErrnoToStatus(errno, fmt::format("{}: mmap", what));
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShareableAllocation>> AllocateHostShareable(uint64_t size_bytes,
                                                                           std::string_view name) {
  const std::string what =
      fmt::format("host runtime: shareable memory '{}' of {} bytes", name, size_bytes);
  if (size_bytes == 0) return absl::InvalidArgumentError(what + ": size is zero");
  ScopedFd fd(::memfd_create(std::string(name).c_str(), MFD_CLOEXEC));
  if (!fd.valid()) return ErrnoToStatus(errno, what + ": memfd_create");
  if (::ftruncate(fd.get(), static_cast<off_t>(size_bytes)) != 0) {
    return ErrnoToStatus(errno, what + ": ftruncate");
  }
  // Device memory is there once allocated: missing memory is an error now, not a SIGBUS on the
  // first touch in some engine.
  if (::fallocate(fd.get(), 0, 0, static_cast<off_t>(size_bytes)) != 0) {
    return ErrnoToStatus(errno, what + ": fallocate");
  }
  absl::StatusOr<void*> data = MapShared(fd.get(), size_bytes, what);
  if (!data.ok()) return data.status();
  return std::make_unique<HostSharedMapping>(std::move(fd), *data, size_bytes);
}

absl::StatusOr<std::unique_ptr<DeviceAllocation>> OpenHostShared(const SharedMemoryHandle& handle) {
  const std::string what = fmt::format(
      "host runtime: opening shared memory of {} bytes from a "
      "'{}' handle",
      handle.size_bytes, handle.backend);
  if (handle.backend != kHostBackend) {
    return absl::InvalidArgumentError(what + ": not a host runtime's handle");
  }
  if (handle.fd < 0) return absl::InvalidArgumentError(what + ": the handle has no descriptor");
  if (handle.size_bytes == 0) return absl::InvalidArgumentError(what + ": size is zero");
  struct stat file {};
  if (::fstat(handle.fd, &file) != 0) return ErrnoToStatus(errno, what + ": fstat");
  if (static_cast<uint64_t>(file.st_size) < handle.size_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("{}: the descriptor names only {} bytes", what, file.st_size));
  }
  absl::StatusOr<void*> data = MapShared(handle.fd, handle.size_bytes, what);
  if (!data.ok()) return data.status();
  return std::make_unique<HostSharedMapping>(ScopedFd(), *data, handle.size_bytes);
}

}  // namespace strata::storage::internal_device
