// PagedKvCache is the connector's validated description of an engine's paged KV cache: for each
// layer, the base address of each plane (K and V, or an MLA latent), and one geometry shared by
// every plane of every layer, with strides in bytes. Built from the engine's tensors
// (strata::connector::LayerKvCache) by ParsePagedKvCache. A plain value; thread-compatible.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "strata/connector.h"

namespace strata::connector::internal {

struct PagedKvGeometry {
  uint32_t num_planes = 2;  // 2: K and V; 1: MLA latent
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t elem_bytes = 0;
  // Byte strides of [block, slot, head]; head_dim elements are contiguous.
  int64_t block_stride_bytes = 0;
  int64_t slot_stride_bytes = 0;
  int64_t head_stride_bytes = 0;
  // Nonzero: the blocks are opaque pages (ConnectorOptions::whole_blocks_only) of this many
  // bytes per layer, each one run from planes[layer][0] + block * block_stride_bytes holding
  // every head's K then V half; chunks are copied page by page, and a chunk's layer payload is
  // its blocks' pages in order (UseOpaquePages).
  uint64_t page_bytes = 0;

  // Bytes of one token of one plane: [kv_heads, head_dim].
  uint64_t row_bytes() const { return uint64_t{num_kv_heads} * head_dim * elem_bytes; }
  uint64_t head_bytes() const { return uint64_t{head_dim} * elem_bytes; }
  // A token's heads are adjacent in memory, so its row is one run.
  bool row_contiguous() const {
    return num_kv_heads == 1 || head_stride_bytes == static_cast<int64_t>(head_bytes());
  }
  // Consecutive slots of a block are adjacent rows, so a run of tokens in one block is one run.
  bool slots_contiguous() const {
    return row_contiguous() && slot_stride_bytes == static_cast<int64_t>(row_bytes());
  }
  friend bool operator==(const PagedKvGeometry&, const PagedKvGeometry&) = default;
};

struct PagedKvCache {
  PagedKvGeometry geometry;
  // planes[layer][plane]: address of element [block 0, slot 0, head 0, dim 0].
  std::vector<std::array<std::byte*, 2>> planes;
  // Bytes addressable from each plane's base (the largest reachable offset plus one row piece).
  uint64_t plane_extent_bytes = 0;
};

// Switches `cache` to page-by-page copies when its blocks' pages are contiguous runs (each
// head's K half, then its V half, heads one after another, as vLLM's CPU backend lays a block
// out); otherwise leaves it copying rows (correct for whole blocks, but one run per token and
// head).
void UseOpaquePages(PagedKvCache& cache);

// Validates `layers` against `layout` (one entry per layer; shapes, head count, head_dim,
// contiguous head_dim, non-negative strides, slots that do not overlap, planes that do not
// overlap) and returns the cache. kInvalidArgument naming the layer and what is wrong.
absl::StatusOr<PagedKvCache> ParsePagedKvCache(const KvLayout& layout,
                                               std::span<const LayerKvCache> layers);

}  // namespace strata::connector::internal
