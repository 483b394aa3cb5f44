#include "connector/src/device_pool_view.h"

#include "fmt/format.h"

namespace strata::connector::internal {

absl::StatusOr<PagedKvCache> DevicePoolAsPagedKvCache(const KvLayout& layout, uint32_t block_tokens,
                                                      const storage::DevicePoolGeometry& geometry,
                                                      std::byte* mapped_base) {
  absl::StatusOr<storage::DevicePoolGeometry> expected =
      storage::DevicePoolGeometryFor(layout, block_tokens, geometry.num_pages);
  if (!expected.ok()) return expected.status();
  if (expected->num_layers != geometry.num_layers || expected->page_bytes != geometry.page_bytes) {
    return absl::InvalidArgumentError(fmt::format(
        "device pool of {} layers of {}-byte pages is not a pool of {}-token blocks of model "
        "'{}' ({} layers of {}-byte pages)",
        geometry.num_layers, geometry.page_bytes, block_tokens, layout.model_id,
        expected->num_layers, expected->page_bytes));
  }
  if (mapped_base == nullptr) {
    return absl::InvalidArgumentError("device pool: the pool is not mapped");
  }
  PagedKvCache cache;
  cache.geometry.num_planes = layout.planes_per_layer();
  cache.geometry.num_blocks = geometry.num_pages;
  cache.geometry.block_size = block_tokens;
  cache.geometry.num_kv_heads = layout.num_kv_heads;
  cache.geometry.head_dim = layout.head_dim;
  cache.geometry.elem_bytes = static_cast<uint32_t>(DtypeSizeBytes(layout.dtype));
  cache.geometry.block_stride_bytes = static_cast<int64_t>(geometry.page_bytes);
  cache.geometry.slot_stride_bytes = static_cast<int64_t>(layout.plane_token_bytes());
  cache.geometry.head_stride_bytes = static_cast<int64_t>(cache.geometry.head_bytes());
  const uint64_t plane_bytes = uint64_t{block_tokens} * layout.plane_token_bytes();
  cache.planes.resize(layout.num_layers);
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    std::byte* page_zero = mapped_base + geometry.offset(layer, 0);
    for (uint32_t plane = 0; plane < layout.planes_per_layer(); ++plane) {
      cache.planes[layer][plane] = page_zero + plane * plane_bytes;
    }
  }
  cache.plane_extent_bytes = (geometry.num_pages - 1) * geometry.page_bytes + plane_bytes;
  return cache;
}

}  // namespace strata::connector::internal
