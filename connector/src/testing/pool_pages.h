// Test helpers over a device pool (T0) mapped in an engine (DevicePoolMapping): fill a chunk's
// pages, and check what they hold, in every layer. Header-only; no state.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "connector/src/engine_client.h"

namespace strata::connector::testing {

// Fills every layer of `pages` with `value`, through the engine's mapping.
inline void FillPoolPages(const internal::DevicePoolMapping& pool, std::span<const uint32_t> pages,
                          uint8_t value) {
  const storage::DevicePoolGeometry& geometry = pool.grant().geometry;
  for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
    for (uint32_t page : pages) {
      std::memset(pool.base() + geometry.offset(layer, page), value, geometry.page_bytes);
    }
  }
}

// Whether every byte of every layer of `pages` is `value`.
inline bool PoolPagesHold(const internal::DevicePoolMapping& pool, std::span<const uint32_t> pages,
                          uint8_t value) {
  const storage::DevicePoolGeometry& geometry = pool.grant().geometry;
  for (uint32_t layer = 0; layer < geometry.num_layers; ++layer) {
    for (uint32_t page : pages) {
      const std::byte* bytes = pool.base() + geometry.offset(layer, page);
      for (uint64_t i = 0; i < geometry.page_bytes; ++i) {
        if (bytes[i] != std::byte{value}) return false;
      }
    }
  }
  return true;
}

}  // namespace strata::connector::testing
