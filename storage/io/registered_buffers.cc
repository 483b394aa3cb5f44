#include "storage/io/registered_buffers.h"

#include <algorithm>
#include <functional>

#include "fmt/format.h"

namespace strata::storage {

absl::StatusOr<RegisteredBuffers> RegisteredBuffers::Build(
    std::span<const std::span<std::byte>> regions, uint64_t max_buffer_bytes) {
  if (max_buffer_bytes == 0) {
    return absl::InvalidArgumentError("registered buffers: max_buffer_bytes is 0");
  }
  std::vector<std::span<std::byte>> sorted;
  for (const std::span<std::byte> region : regions) {
    if (!region.empty()) sorted.push_back(region);
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return std::less<const std::byte*>()(a.data(), b.data());
  });
  RegisteredBuffers buffers;
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0 && std::less<const std::byte*>()(sorted[i].data(),
                                               sorted[i - 1].data() + sorted[i - 1].size())) {
      return absl::InvalidArgumentError(
          fmt::format("registered buffers: regions at {} and {} overlap",
                      static_cast<const void*>(sorted[i - 1].data()),
                      static_cast<const void*>(sorted[i].data())));
    }
    for (uint64_t done = 0; done < sorted[i].size();) {
      const uint64_t n = std::min<uint64_t>(max_buffer_bytes, sorted[i].size() - done);
      buffers.iovecs_.push_back({.iov_base = sorted[i].data() + done, .iov_len = n});
      done += n;
    }
  }
  if (buffers.iovecs_.size() > kMaxRegisteredBuffers) {
    return absl::InvalidArgumentError(
        fmt::format("registered buffers: {} buffers exceed the kernel's {}", buffers.iovecs_.size(),
                    kMaxRegisteredBuffers));
  }
  return buffers;
}

std::optional<uint16_t> RegisteredBuffers::Find(const std::byte* data, uint64_t size_bytes) const {
  const auto address = reinterpret_cast<uintptr_t>(data);
  // The last buffer starting at or below `data`.
  auto it = std::upper_bound(iovecs_.begin(), iovecs_.end(), address,
                             [](uintptr_t at, const iovec& buffer) {
                               return at < reinterpret_cast<uintptr_t>(buffer.iov_base);
                             });
  if (it == iovecs_.begin()) return std::nullopt;
  --it;
  const auto begin = reinterpret_cast<uintptr_t>(it->iov_base);
  if (address - begin > it->iov_len || size_bytes > it->iov_len - (address - begin)) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(it - iovecs_.begin());
}

}  // namespace strata::storage
