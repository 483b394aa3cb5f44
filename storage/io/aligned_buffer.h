// AlignedBuffer owns zero-initialized heap memory aligned to kIoAlignment, sized up to a multiple
// of it, for O_DIRECT transfers (headers, staging of unaligned payloads). Move-only;
// thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>

#include "storage/io/io_engine.h"

namespace strata::storage {

inline constexpr uint64_t AlignUp(uint64_t n) {
  return (n + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
}
inline constexpr uint64_t AlignDown(uint64_t n) { return n / kIoAlignment * kIoAlignment; }
inline bool IsAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kIoAlignment == 0; }

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // At least `size_bytes` bytes (rounded up to kIoAlignment), zeroed. Aborts on allocation
  // failure like operator new.
  explicit AlignedBuffer(uint64_t size_bytes) : size_(AlignUp(size_bytes)) {
    if (size_ == 0) return;
    void* p = std::aligned_alloc(kIoAlignment, size_);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, size_);
    data_.reset(static_cast<std::byte*>(p));
  }

  std::byte* data() const { return data_.get(); }
  uint64_t size() const { return size_; }
  std::span<std::byte> span() const { return {data_.get(), static_cast<size_t>(size_)}; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  uint64_t size_ = 0;
};

}  // namespace strata::storage
