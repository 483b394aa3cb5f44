#include "storage/host/shared_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "core/status_util.h"
#include "fmt/format.h"

namespace strata::storage {
namespace {

constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

std::string HugepageHint(bool hugepages) {
  return hugepages ? " (huge pages: reserve them with vm.nr_hugepages, or set use_hugepages=false)"
                   : "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<SharedArena>> SharedArena::Create(
    const SharedArenaOptions& options) {
  const std::string what =
      fmt::format("shared arena '{}' of {} bytes", options.name, options.size_bytes);
  if (options.size_bytes == 0) return absl::InvalidArgumentError(what + ": size is zero");
  if (options.use_hugepages && options.size_bytes % kHugePageBytes != 0) {
    return absl::InvalidArgumentError(
        fmt::format("{}: size must be a multiple of the 2 MiB huge page size", what));
  }
  unsigned int flags = MFD_CLOEXEC;
  if (options.use_hugepages) flags |= MFD_HUGETLB;
  ScopedFd fd(::memfd_create(options.name.c_str(), flags));
  if (!fd.valid()) {
    return ErrnoToStatus(
        errno, fmt::format("{}: memfd_create{}", what, HugepageHint(options.use_hugepages)));
  }
  if (::ftruncate(fd.get(), static_cast<off_t>(options.size_bytes)) != 0) {
    return ErrnoToStatus(errno, fmt::format("{}: ftruncate", what));
  }
  int mmap_flags = MAP_SHARED;
  if (options.prefault) {
    // fallocate reports missing memory as ENOSPC/ENOMEM here rather than SIGBUS on first touch.
    const int rc = ::fallocate(fd.get(), 0, 0, static_cast<off_t>(options.size_bytes));
    if (rc != 0) {
      return ErrnoToStatus(
          errno, fmt::format("{}: fallocate{}", what, HugepageHint(options.use_hugepages)));
    }
    mmap_flags |= MAP_POPULATE;
  }
  void* base = ::mmap(nullptr, options.size_bytes, PROT_READ | PROT_WRITE, mmap_flags, fd.get(), 0);
  if (base == MAP_FAILED) {
    return ErrnoToStatus(errno,
                         fmt::format("{}: mmap{}", what, HugepageHint(options.use_hugepages)));
  }
  return std::unique_ptr<SharedArena>(new SharedArena(std::move(fd), static_cast<std::byte*>(base),
                                                      options.size_bytes, options.use_hugepages));
}

SharedArena::~SharedArena() { ::munmap(base_, size_bytes_); }

}  // namespace strata::storage
