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

void PrefaultForWrite(std::span<std::byte> bytes) {
  Populate(bytes.data(), bytes.size(), MADV_POPULATE_WRITE);
}

void PrefaultForRead(std::span<const std::byte> bytes) {
  Populate(bytes.data(), bytes.size(), MADV_POPULATE_READ);
}

}  // namespace strata
