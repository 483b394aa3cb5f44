// Test helpers over a device pool (T0) mapped in an engine: fill a chunk's pages, and check what
// they hold, in every layer. The pool is given by its base address and geometry, or by the
// engine's DevicePoolMapping. Header-only; no state.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "connector/src/engine_client.h"

namespace strata::connector::testing {

// Fills every layer of `pages` with `value`.
inline void FillPoolPages(std::byte* base, const storage::DevicePoolGeometry& geometry,
                          std::span<const uint32_t> pages, uint8_t value) {
  for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
    for (uint32_t page : pages) {
      std::memset(base + geometry.offset(layer, page), value, geometry.page_bytes);
    }
  }
}

// Whether every byte of every layer of `pages` is `value`.
inline bool PoolPagesHold(const std::byte* base, const storage::DevicePoolGeometry& geometry,
                          std::span<const uint32_t> pages, uint8_t value) {
  for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
    for (uint32_t page : pages) {
      const std::byte* bytes = base + geometry.offset(layer, page);
      for (uint64_t i = 0; i < geometry.page_bytes; ++i) {
        if (bytes[i] != std::byte{value}) return false;
      }
    }
  }
  return true;
}

inline void FillPoolPages(const internal::DevicePoolMapping& pool, std::span<const uint32_t> pages,
                          uint8_t value) {
  FillPoolPages(pool.base(), pool.grant().geometry, pages, value);
}

inline bool PoolPagesHold(const internal::DevicePoolMapping& pool, std::span<const uint32_t> pages,
                          uint8_t value) {
  return PoolPagesHold(pool.base(), pool.grant().geometry, pages, value);
}

}  // namespace strata::connector::testing
