#include "controller/index/table_memory.h"

#include <sys/mman.h>

#include <bit>
#include <cstdint>
#include <new>

#include "core/check.h"

namespace strata::controller::internal_index {
namespace {

constexpr size_t kHugePageBytes = 2u << 20;

}  // namespace

TableMemory::~TableMemory() {
  for (const Range& range : mappings_) munmap(range.start, range.bytes);
}

void* TableMemory::Allocate(size_t bytes) {
  STRATA_CHECK(std::has_single_bit(bytes) && bytes >= kMinBlockBytes);
  const size_t size_class = static_cast<size_t>(std::countr_zero(bytes));
  if (free_blocks_.size() <= size_class) free_blocks_.resize(size_class + 1);
  std::vector<void*>& pool = free_blocks_[size_class];
  allocated_bytes_ += bytes;
  if (!pool.empty()) {
    void* const block = pool.back();
    pool.pop_back();
    return block;  // zero: Release gave its pages back
  }
  if (bytes < kHugePageBytes) {
    void* const block =
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) throw std::bad_alloc();
    mappings_.push_back({block, bytes});
    return block;
  }
  // Map a huge page more than needed, to align the block to 2 MiB; the slack stays mapped (and
  // untouched, so it costs no memory) until the destructor unmaps the whole range.
  void* const raw = mmap(nullptr, bytes + kHugePageBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  mappings_.push_back({raw, bytes + kHugePageBytes});
  const uintptr_t aligned =
      (reinterpret_cast<uintptr_t>(raw) + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  // Advice: when it fails (THP disabled), the block is backed by small pages and still works.
  (void)madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void TableMemory::Release(void* block, size_t bytes) {
  const size_t size_class = static_cast<size_t>(std::countr_zero(bytes));
  STRATA_CHECK(size_class < free_blocks_.size());
  STRATA_CHECK(madvise(block, bytes, MADV_DONTNEED) == 0);
  free_blocks_[size_class].push_back(block);
  allocated_bytes_ -= bytes;
}

}  // namespace strata::controller::internal_index
