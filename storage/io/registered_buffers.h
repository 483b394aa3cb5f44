// RegisteredBuffers maps memory regions registered with an io_uring ring to the ring's buffer
// indexes: the regions are split into buffers of at most `max_buffer_bytes` (the kernel takes at
// most 1 GiB per buffer), and Find answers, with a binary search, which buffer wholly holds a
// request's [data, data + size). Value type; not thread-safe (the owning engine's thread uses it).
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::storage {

// Most bytes one registered buffer may span (the kernel's limit).
inline constexpr uint64_t kMaxRegisteredBufferBytes = 1ull << 30;
// Most buffers one ring may register (the kernel's IORING_MAX_REG_BUFFERS).
inline constexpr size_t kMaxRegisteredBuffers = 1u << 14;

class RegisteredBuffers {
 public:
  RegisteredBuffers() = default;

  // Splits `regions` (empty ones are skipped) into buffers of at most `max_buffer_bytes`, in
  // address order. kInvalidArgument when regions overlap, max_buffer_bytes is 0, or more than
  // kMaxRegisteredBuffers buffers would result.
  static absl::StatusOr<RegisteredBuffers> Build(std::span<const std::span<std::byte>> regions,
                                                 uint64_t max_buffer_bytes);

  // The buffers, as io_uring_register_buffers takes them; a buffer's index is its position.
  std::span<const iovec> iovecs() const { return iovecs_; }
  bool empty() const { return iovecs_.empty(); }

  // The index of the buffer that holds all of [data, data + size_bytes), or nullopt when none
  // does (outside every region, or straddling a buffer's end).
  std::optional<uint16_t> Find(const std::byte* data, uint64_t size_bytes) const;

 private:
  std::vector<iovec> iovecs_;  // sorted by iov_base, disjoint
};

}  // namespace strata::storage
