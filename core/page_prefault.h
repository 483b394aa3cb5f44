// Faulting mapped memory in ahead of a copy that will touch it: one system call (madvise
// MADV_POPULATE_WRITE or MADV_POPULATE_READ, Linux 5.14) instead of one page fault per page as the
// copy walks the range. On a virtual machine a page fault costs tens of microseconds (a trap out
// of the guest), and populating the same pages costs a few: for a 32 MiB chunk landing in fresh
// arena pages, that is the difference between ~0.2 s and ~20 ms.
//
// Best effort: what the bytes hold is never touched, a kernel without these advices leaves the
// pages to fault on first touch, and a range that is not mapped (or not writable, for writes) is
// left alone. The pages at either end of a range are populated whole.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace strata {

// One mapping whose pages, once faulted in, stay in for as long as it is mapped (nothing gives
// them back: no MADV_DONTNEED, no hole punched in its file), so that faulting a range in a second
// time can be skipped. Populating pages that are in already still costs a walk of the page tables
// (about 0.14 us a 4 KiB page here: ~18 ms for 512 MiB), which a warm transfer pays every time
// without this. It remembers, a bit for each 64 KiB granule, which granules a call covered whole
// and faulted in; the partial granules at a range's ends are faulted in each time. A range that
// is not inside the mapping is faulted in all the same, and not remembered.
//
// Thread-safe (relaxed atomics: two threads may both fault a granule in, which is harmless). It
// does not own the mapping, which must outlive it.
class PrefaultedRegion {
 public:
  static constexpr uint64_t kGranuleBytes = 64 << 10;

  explicit PrefaultedRegion(std::span<std::byte> mapping);
  PrefaultedRegion(const PrefaultedRegion&) = delete;
  PrefaultedRegion& operator=(const PrefaultedRegion&) = delete;

  std::span<std::byte> mapping() const { return mapping_; }
  // Makes the pages under `bytes` present and writable in this process's page tables (allocating
  // them in a shared memory file that holds none yet).
  void ForWrite(std::span<std::byte> bytes) const;
  // Makes the pages under `bytes` present in this process's page tables, for reading.
  void ForRead(std::span<const std::byte> bytes) const;

 private:
  void Prefault(const std::byte* data, uint64_t size, bool for_write) const;

  const std::span<std::byte> mapping_;
  const std::unique_ptr<std::atomic<uint64_t>[]> granules_;  // bit set: faulted in whole
};

}  // namespace strata
