// PageAllocator hands out fixed-size pages of an arena as lists of extents (runs of consecutive
// pages). A request is served by one free run when one is large enough (best fit: the smallest
// such run), otherwise by the largest free runs first and a best-fit run for the rest, so a chunk
// is split into as few extents as the free space allows. Freed extents coalesce with their free
// neighbours. Because a request may be split, Allocate never fails while enough pages are free in
// total: churn cannot fragment the arena into unusable holes; it can only raise the number of
// extents per chunk.
//
// Pages are numbered [0, num_pages). Not thread-safe: the owner (HostTier) serializes calls.
// Freeing a page that is not allocated (double free, out of range) is a broken invariant and
// aborts through STRATA_CHECK.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"

namespace strata::storage {

// A run of `num_pages` consecutive pages starting at page `first_page`.
struct Extent {
  uint32_t first_page = 0;
  uint32_t num_pages = 0;

  uint64_t end_page() const { return uint64_t{first_page} + num_pages; }
  friend bool operator==(const Extent&, const Extent&) = default;
};

// Most chunks fit in one or two extents; longer lists spill to the heap.
using ExtentList = absl::InlinedVector<Extent, 2>;

class PageAllocator {
 public:
  // An allocator over `num_pages` pages, all free.
  explicit PageAllocator(uint32_t num_pages);

  PageAllocator(const PageAllocator&) = delete;
  PageAllocator& operator=(const PageAllocator&) = delete;

  // Allocates `num_pages` pages as a list of disjoint extents whose sizes sum to `num_pages`.
  // kInvalidArgument for zero pages; kResourceExhausted when fewer than `num_pages` pages are
  // free (nothing is allocated then).
  absl::StatusOr<ExtentList> Allocate(uint32_t num_pages);

  // Returns `extents` to the free pool. Every page must be allocated (STRATA_CHECK).
  void Free(std::span<const Extent> extents);

  uint32_t num_pages() const { return num_pages_; }
  uint32_t free_pages() const { return free_pages_; }
  uint32_t used_pages() const { return num_pages_ - free_pages_; }
  // Number of maximal free runs (1 when all free space is contiguous).
  size_t free_runs() const { return by_start_.size(); }
  // Size of the largest free run in pages (0 when full).
  uint32_t largest_free_run() const;
  // The free runs in page order, for consistency checks.
  std::vector<Extent> FreeRunsForTesting() const;

 private:
  void InsertRun(uint32_t first_page, uint32_t num_pages);
  void EraseRun(uint32_t first_page, uint32_t num_pages);
  void FreeOne(Extent extent);

  uint32_t num_pages_;
  uint32_t free_pages_;
  absl::btree_map<uint32_t, uint32_t> by_start_;            // first page -> run length
  absl::btree_set<std::pair<uint32_t, uint32_t>> by_size_;  // (run length, first page)
};

}  // namespace strata::storage
