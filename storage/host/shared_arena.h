// SharedArena is one memfd-backed region of shared memory, mapped MAP_SHARED into this process.
// Its descriptor can be passed to other processes (engines, over SCM_RIGHTS), which map the same
// pages: the host tier's chunks live here and are read and written in place by every process.
//
// Immutable after Create and thread-safe. The arena owns its mapping and its descriptor and
// releases both on destruction; pointers into it are valid until then. Processes that received
// the descriptor keep their own mappings alive independently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/page_prefault.h"
#include "core/scoped_fd.h"

namespace strata::storage {

struct SharedArenaOptions {
  uint64_t size_bytes = 0;
  // Back the arena with hugetlbfs pages (MFD_HUGETLB, default huge page size). size_bytes must
  // then be a multiple of the huge page size, and the pages must be reserved in the kernel's
  // pool (vm.nr_hugepages): Create fails with a message saying so instead of falling back.
  bool use_hugepages = false;
  // Allocate and map every page up front (fallocate + MAP_POPULATE): a daemon learns at start-up
  // that the memory is not there, instead of a SIGBUS on first touch, and stores pay no page
  // faults. Without it pages are allocated on first touch.
  bool prefault = false;
  // The memfd's name, shown in /proc/<pid>/maps and /proc/<pid>/fd.
  std::string name = "strata-arena";
};

class SharedArena {
 public:
  // kInvalidArgument for a zero size or (with hugepages) one that is not a multiple of 2 MiB;
  // kResourceExhausted when the memory cannot be had (including an empty huge page pool);
  // other errno-derived codes for failed system calls. Every message names the arena.
  static absl::StatusOr<std::unique_ptr<SharedArena>> Create(const SharedArenaOptions& options);

  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;
  ~SharedArena();

  // The memfd (O_CLOEXEC); owned by the arena. Dup it to hand it out.
  int fd() const { return fd_.get(); }
  std::byte* base() const { return base_; }
  uint64_t size_bytes() const { return size_bytes_; }
  bool hugepages() const { return hugepages_; }
  // Faults ranges of the arena into this process's mapping ahead of copies, once a granule (the
  // arena's pages are never given back while it lives).
  const PrefaultedRegion& pages() const { return pages_; }

 private:
  SharedArena(ScopedFd fd, std::byte* base, uint64_t size_bytes, bool hugepages)
      : fd_(std::move(fd)),
        base_(base),
        size_bytes_(size_bytes),
        hugepages_(hugepages),
        pages_(std::span<std::byte>(base, size_bytes)) {}

  ScopedFd fd_;
  std::byte* base_;
  uint64_t size_bytes_;
  bool hugepages_;
  PrefaultedRegion pages_;
};

}  // namespace strata::storage
