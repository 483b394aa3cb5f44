#include "controller/index/huge_page_array.h"

#include <sys/mman.h>

#include <cstdint>

namespace strata::controller::internal_index {
namespace {

constexpr size_t kHugePageBytes = 2u << 20;
constexpr size_t kCacheLineBytes = 64;

size_t RoundedBytes(size_t bytes) {
  const size_t align = ArrayAlignment(bytes);
  return (bytes + align - 1) / align * align;
}

}  // namespace

size_t ArrayAlignment(size_t bytes) {
  return bytes >= kHugePageBytes ? kHugePageBytes : kCacheLineBytes;
}

void* AllocateArrayBytes(size_t bytes) {
  const size_t size = RoundedBytes(bytes);
  if (ArrayAlignment(bytes) != kHugePageBytes) {
    return ::operator new(size, std::align_val_t(kCacheLineBytes));
  }
  // Fresh pages from the kernel (memory malloc reuses is already backed by small pages): map a
  // huge page more than needed and unmap the unaligned head and the tail.
  void* const raw = mmap(nullptr, size + kHugePageBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  const uintptr_t end = start + size + kHugePageBytes;
  if (aligned > start) munmap(raw, aligned - start);
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  // Advice: when it fails (THP disabled), the array is backed by small pages and still works.
  (void)madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void FreeArrayBytes(void* data, size_t bytes) {
  if (ArrayAlignment(bytes) != kHugePageBytes) {
    ::operator delete(data, std::align_val_t(kCacheLineBytes));
  } else {
    munmap(data, RoundedBytes(bytes));
  }
}

}  // namespace strata::controller::internal_index
