#include "storage/device/device_pools.h"

#include <algorithm>
#include <utility>

#include "core/status_util.h"
#include "fmt/format.h"

namespace strata::storage {

DevicePools::DevicePools(DeviceRuntime& runtime, DevicePoolsOptions options)
    : runtime_(runtime), options_(options) {}

DevicePools::~DevicePools() = default;

absl::StatusOr<DevicePool*> DevicePools::ForLayout(const KvLayout& layout) {
  const uint64_t fingerprint = layout.Fingerprint();
  absl::MutexLock lock(&mu_);
  if (auto it = pools_.find(fingerprint); it != pools_.end()) {
    if (it->second.pool == nullptr) return it->second.failure;
    return it->second.pool.get();
  }
  Entry& entry = pools_[fingerprint];
  entry.layout = layout;
  const std::string what =
      fmt::format("device pool for {} (rank {})", layout.model_id, layout.tp_rank);
  absl::StatusOr<DevicePoolGeometry> one_page =
      DevicePoolGeometryFor(layout, options_.block_tokens, 1);
  if (!one_page.ok()) {
    entry.failure = Annotate(one_page.status(), what);
    return entry.failure;
  }
  const uint64_t pages = options_.bytes_per_layout / one_page->total_bytes();
  if (pages == 0 || pages > UINT32_MAX) {
    entry.failure = absl::InvalidArgumentError(fmt::format(
        "{}: {} bytes hold {} pages of {} bytes (every layer of a {}-token block); a pool needs "
        "1..2^32-1",
        what, options_.bytes_per_layout, pages, one_page->total_bytes(), options_.block_tokens));
    return entry.failure;
  }
  DevicePoolGeometry geometry = *one_page;
  geometry.num_pages = static_cast<uint32_t>(pages);
  DevicePoolOptions pool_options{.geometry = geometry,
                                 .name = fmt::format("strata-t0-{:016x}", fingerprint)};
  if (options_.on_evict) {
    pool_options.on_evict = [on_evict = options_.on_evict, layout](
                                const DevicePool& evicting, const ChunkKey& key,
                                std::span<const uint32_t> pages) {
      on_evict(layout, evicting, key, pages);
    };
  }
  if (options_.on_evictable) {
    pool_options.on_evictable = [on_evictable = options_.on_evictable, layout](
                                    DevicePool& pool, const ChunkKey& key, uint64_t owner) {
      on_evictable(layout, pool, key, owner);
    };
  }
  absl::StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(runtime_, pool_options);
  if (!pool.ok()) {
    entry.failure = Annotate(pool.status(), what);
    return entry.failure;
  }
  entry.pool = *std::move(pool);
  return entry.pool.get();
}

std::vector<LayoutPoolStats> DevicePools::Stats() const {
  std::vector<LayoutPoolStats> stats;
  absl::MutexLock lock(&mu_);
  for (const auto& [fingerprint, entry] : pools_) {
    if (entry.pool == nullptr) continue;
    stats.push_back({.layout_fingerprint = fingerprint,
                     .model_id = entry.layout.model_id,
                     .tp_rank = entry.layout.tp_rank,
                     .pool = entry.pool->Stats()});
  }
  std::sort(stats.begin(), stats.end(), [](const LayoutPoolStats& a, const LayoutPoolStats& b) {
    return a.layout_fingerprint < b.layout_fingerprint;
  });
  return stats;
}

}  // namespace strata::storage
