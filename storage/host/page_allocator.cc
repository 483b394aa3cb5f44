#include "storage/host/page_allocator.h"

#include <iterator>

#include "core/check.h"
#include "fmt/format.h"

namespace strata::storage {

PageAllocator::PageAllocator(uint32_t num_pages) : num_pages_(num_pages), free_pages_(num_pages) {
  if (num_pages > 0) InsertRun(0, num_pages);
}

uint32_t PageAllocator::largest_free_run() const {
  return by_size_.empty() ? 0 : std::prev(by_size_.end())->first;
}

std::vector<Extent> PageAllocator::FreeRunsForTesting() const {
  std::vector<Extent> runs;
  runs.reserve(by_start_.size());
  for (const auto& [first, length] : by_start_) runs.push_back({first, length});
  return runs;
}

void PageAllocator::InsertRun(uint32_t first_page, uint32_t num_pages) {
  by_start_.emplace(first_page, num_pages);
  by_size_.emplace(num_pages, first_page);
}

void PageAllocator::EraseRun(uint32_t first_page, uint32_t num_pages) {
  by_start_.erase(first_page);
  by_size_.erase({num_pages, first_page});
}

absl::StatusOr<ExtentList> PageAllocator::Allocate(uint32_t num_pages) {
  if (num_pages == 0) return absl::InvalidArgumentError("page allocator: zero pages requested");
  if (num_pages > free_pages_) {
    return absl::ResourceExhaustedError(fmt::format(
        "page allocator: {} pages requested, {} of {} free", num_pages, free_pages_, num_pages_));
  }
  ExtentList extents;
  uint32_t remaining = num_pages;
  while (remaining > 0) {
    auto fit = by_size_.lower_bound({remaining, 0});
    if (fit == by_size_.end()) {
      // No run holds the rest: take the largest run whole.
      const auto [length, first] = *std::prev(by_size_.end());
      EraseRun(first, length);
      extents.push_back({first, length});
      remaining -= length;
      continue;
    }
    // Best fit: carve the tail of the smallest run that holds the rest, so the run keeps its
    // start and only its length changes.
    const auto [length, first] = *fit;
    by_size_.erase(fit);
    if (length == remaining) {
      by_start_.erase(first);
    } else {
      by_start_[first] = length - remaining;
      by_size_.emplace(length - remaining, first);
    }
    extents.push_back({first + (length - remaining), remaining});
    remaining = 0;
  }
  free_pages_ -= num_pages;
  return extents;
}

void PageAllocator::Free(std::span<const Extent> extents) {
  for (const Extent& extent : extents) FreeOne(extent);
}

void PageAllocator::FreeOne(Extent extent) {
  STRATA_CHECK_MSG(extent.num_pages > 0 && extent.end_page() <= num_pages_,
                   "freeing an extent outside the arena");
  uint32_t first = extent.first_page;
  uint32_t length = extent.num_pages;
  auto next = by_start_.lower_bound(first);
  if (next != by_start_.end()) {
    STRATA_CHECK_MSG(next->first >= extent.end_page(), "double free: extent overlaps a free run");
  }
  if (next != by_start_.begin()) {
    auto prev = std::prev(next);
    const uint64_t prev_end = uint64_t{prev->first} + prev->second;
    STRATA_CHECK_MSG(prev_end <= first, "double free: extent overlaps a free run");
    if (prev_end == first) {
      first = prev->first;
      length += prev->second;
      by_size_.erase({prev->second, prev->first});
      by_start_.erase(prev);
    }
  }
  next = by_start_.lower_bound(first);
  if (next != by_start_.end() && next->first == uint64_t{first} + length) {
    length += next->second;
    by_size_.erase({next->second, next->first});
    by_start_.erase(next);
  }
  InsertRun(first, length);
  free_pages_ += extent.num_pages;
}

}  // namespace strata::storage
