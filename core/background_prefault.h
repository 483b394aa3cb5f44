// BackgroundPrefault faults a mapping's pages in on a thread of its own, a step at a time, from
// construction until it is done, gives up or is destroyed, so that the first copies into the
// mapping find their pages present instead of faulting them in one at a time (on a virtual
// machine a fault costs about a microsecond a 4 KiB page: a 512 MiB store runs at a fifth of
// memcpy speed on fresh pages).
//
//   kAllocate      populates every step for writing (MADV_POPULATE_WRITE): a shared memory file's
//                  missing pages are allocated, charged to this process. The daemon's way: it
//                  owns the host arena.
//   kResidentOnly  populates only steps whose pages the file holds already (mincore), passing over
//                  the mapping again every `retry` until every step is in or `give_up_after`
//                  has passed: page tables only, nothing allocated. An engine's way: the daemon
//                  allocates the arena, and the engine's cgroup is never charged for it.
//
// Best effort, as PrefaultedRegion (whose granules it marks, so later per-copy prefaults skip
// them): a kernel without the advices leaves pages to fault on first touch. The thread runs at a
// lower priority (nice 10) where the system lets it.
//
// Thread-safety: the accessors may be called from any thread. Ownership: the region (and its
// mapping) must outlive this object; the destructor stops the thread within one step and joins
// it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "core/page_prefault.h"

namespace strata {

class BackgroundPrefault {
 public:
  enum class Mode { kAllocate, kResidentOnly };
  static constexpr uint64_t kStepBytes = 64 << 20;

  BackgroundPrefault(const PrefaultedRegion& region, Mode mode,
                     std::chrono::milliseconds give_up_after = std::chrono::minutes(5),
                     std::chrono::milliseconds retry = std::chrono::milliseconds(50));
  BackgroundPrefault(const BackgroundPrefault&) = delete;
  BackgroundPrefault& operator=(const BackgroundPrefault&) = delete;
  ~BackgroundPrefault();

  // Bytes of the mapping faulted in so far.
  uint64_t done_bytes() const { return done_bytes_.load(std::memory_order_acquire); }
  // True once every step is in (or the thread stopped: gave up, or is being destroyed).
  bool finished() const { return finished_.load(std::memory_order_acquire); }

 private:
  void Run(Mode mode, std::chrono::milliseconds give_up_after, std::chrono::milliseconds retry);
  // Whether every page of `step` (a page-aligned range of the mapping) is in the file.
  bool Resident(uint64_t offset, uint64_t length) const;

  const PrefaultedRegion& region_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::atomic<uint64_t> done_bytes_{0};
  std::thread thread_;
};

}  // namespace strata
