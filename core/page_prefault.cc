#include "core/page_prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace strata {
namespace {

void Populate(const std::byte* data, size_t size, int advice) {
  if (size == 0) return;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data) + size;
  (void)madvise(reinterpret_cast<void*>(begin), end - begin, advice);
}

}  // namespace

PrefaultedRegion::PrefaultedRegion(std::span<std::byte> mapping)
    : mapping_(mapping),
      granules_(
          std::make_unique<std::atomic<uint64_t>[]>((mapping.size() / kGranuleBytes + 63) / 64)) {}

void PrefaultedRegion::ForWrite(std::span<std::byte> bytes) const {
  Prefault(bytes.data(), bytes.size(), /*for_write=*/true);
}

void PrefaultedRegion::ForRead(std::span<const std::byte> bytes) const {
  Prefault(bytes.data(), bytes.size(), /*for_write=*/false);
}

void PrefaultedRegion::Prefault(const std::byte* data, uint64_t size, bool for_write) const {
  const int advice = for_write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;
  const auto at = reinterpret_cast<uintptr_t>(data);
  const auto base = reinterpret_cast<uintptr_t>(mapping_.data());
  if (size == 0 || at < base || at - base > mapping_.size() ||
      size > mapping_.size() - (at - base)) {
    Populate(data, size, advice);
    return;
  }
  // Offsets into the mapping from here on.
  const uint64_t begin = at - base;
  const uint64_t end = begin + size;
  const uint64_t first_whole = (begin + kGranuleBytes - 1) / kGranuleBytes;
  const uint64_t end_whole = end / kGranuleBytes;
  uint64_t from = begin;  // the start of the run still to fault in
  const auto fault = [&](uint64_t until) {
    if (until > from) Populate(mapping_.data() + from, until - from, advice);
  };
  for (uint64_t g = first_whole; g < end_whole; ++g) {
    const uint64_t bit = uint64_t{1} << (g % 64);
    std::atomic<uint64_t>& word = granules_[g / 64];
    if ((word.load(std::memory_order_relaxed) & bit) != 0) {
      fault(g * kGranuleBytes);  // what comes before this granule
      from = (g + 1) * kGranuleBytes;
      continue;
    }
    word.fetch_or(bit, std::memory_order_relaxed);
  }
  fault(end);
}

}  // namespace strata
