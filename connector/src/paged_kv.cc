#include "connector/src/paged_kv.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "fmt/ranges.h"

namespace strata::connector::internal {
namespace {

// Element geometry of one plane: [block, slot, head, dim] sizes and strides (elements).
struct PlaneDims {
  std::array<int64_t, 4> size{};
  std::array<int64_t, 4> stride{};
  friend bool operator==(const PlaneDims&, const PlaneDims&) = default;
};

absl::Status Bad(size_t layer, std::string_view what) {
  return absl::InvalidArgumentError(fmt::format("kv cache layer {}: {}", layer, what));
}

absl::Status CheckTensor(size_t layer, const KvTensor& t, std::string_view name) {
  if (t.data == nullptr) return Bad(layer, fmt::format("{} has a null data pointer", name));
  if (t.shape.size() != t.strides.size()) {
    return Bad(layer, fmt::format("{} has shape {} but strides {}", name, t.shape, t.strides));
  }
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] <= 0) return Bad(layer, fmt::format("{} has shape {}", name, t.shape));
    if (t.strides[i] < 0) return Bad(layer, fmt::format("{} has strides {}", name, t.strides));
  }
  return absl::OkStatus();
}

// Reads [block, slot, head, dim] from dims [first, first + 4) of `t`, or, for a 3-dim MLA
// tensor, [block, slot, dim] with one head.
PlaneDims DimsOf(const KvTensor& t, size_t first, bool three_dims) {
  PlaneDims d;
  if (three_dims) {
    d.size = {t.shape[first], t.shape[first + 1], 1, t.shape[first + 2]};
    d.stride = {t.strides[first], t.strides[first + 1], t.shape[first + 2], t.strides[first + 2]};
  } else {
    for (size_t i = 0; i < 4; ++i) {
      d.size[i] = t.shape[first + i];
      d.stride[i] = t.strides[first + i];
    }
  }
  return d;
}

// Elements addressable from a base with dimensions (size, stride) around a contiguous innermost
// run of `inner` elements, and whether no two elements share an address (sorted by stride, each
// dimension's stride spans everything inside it).
struct Extent {
  int64_t elems = 0;
  bool injective = true;
};
Extent ExtentOf(std::vector<std::pair<int64_t, int64_t>> dims, int64_t inner) {
  std::sort(dims.begin(), dims.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  Extent e{inner, true};
  for (const auto& [size, stride] : dims) {
    if (size > 1 && stride < e.elems) e.injective = false;
    e.elems += stride * (size - 1);
  }
  return e;
}
Extent PlaneExtent(const PlaneDims& d) {
  return ExtentOf({{d.size[0], d.stride[0]}, {d.size[1], d.stride[1]}, {d.size[2], d.stride[2]}},
                  d.size[3]);
}

}  // namespace

void UseOpaquePages(PagedKvCache& cache) {
  PagedKvGeometry& g = cache.geometry;
  const int64_t half = g.block_size * static_cast<int64_t>(g.head_bytes());  // one head's K
  const bool contiguous =
      g.num_planes == 2 && g.slot_stride_bytes == static_cast<int64_t>(g.head_bytes()) &&
      (g.num_kv_heads == 1 || g.head_stride_bytes == 2 * half) &&
      g.block_stride_bytes >= 2 * half * static_cast<int64_t>(g.num_kv_heads) &&
      std::all_of(cache.planes.begin(), cache.planes.end(),
                  [&](const auto& planes) { return planes[1] - planes[0] == half; });
  g.page_bytes = contiguous ? 2 * static_cast<uint64_t>(half) * g.num_kv_heads : 0;
}

absl::StatusOr<PagedKvCache> ParsePagedKvCache(const KvLayout& layout,
                                               std::span<const LayerKvCache> layers) {
  if (absl::Status s = layout.Validate(); !s.ok()) return s;
  if (layers.size() != layout.num_layers) {
    return absl::InvalidArgumentError(fmt::format("kv cache: {} layers given, the layout has {}",
                                                  layers.size(), layout.num_layers));
  }
  const bool mla = layout.kind == KvKind::kMlaLatent;
  const uint32_t elem = DtypeSizeBytes(layout.dtype);
  PagedKvCache cache;
  cache.planes.resize(layers.size());
  PlaneDims first_dims;
  int64_t first_plane_stride = -1;
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerKvCache& layer = layers[l];
    if (absl::Status s = CheckTensor(l, layer.kv, "kv"); !s.ok()) return s;
    PlaneDims dims;
    int64_t plane_stride = 0;  // elements between K and V of a stacked tensor
    std::array<std::byte*, 2> planes{static_cast<std::byte*>(layer.kv.data), nullptr};
    if (mla) {
      if (layer.v.has_value()) return Bad(l, "an MLA layout has one plane; got a V tensor");
      if (layer.kv.shape.size() == 3) {
        dims = DimsOf(layer.kv, 0, /*three_dims=*/true);
      } else if (layer.kv.shape.size() == 4) {
        dims = DimsOf(layer.kv, 0, false);
      } else {
        return Bad(l, fmt::format("MLA tensor of shape {}; want [num_blocks, block_size, "
                                  "head_dim] or [num_blocks, block_size, 1, head_dim]",
                                  layer.kv.shape));
      }
    } else if (layer.v.has_value()) {
      if (absl::Status s = CheckTensor(l, *layer.v, "v"); !s.ok()) return s;
      if (layer.kv.shape.size() != 4 || layer.v->shape.size() != 4) {
        return Bad(l, fmt::format("separate K {} and V {} must both be [num_blocks, block_size, "
                                  "kv_heads, head_dim]",
                                  layer.kv.shape, layer.v->shape));
      }
      dims = DimsOf(layer.kv, 0, false);
      if (!(DimsOf(*layer.v, 0, false) == dims)) {
        return Bad(l,
                   fmt::format("K (shape {}, strides {}) and V (shape {}, strides {}) differ",
                               layer.kv.shape, layer.kv.strides, layer.v->shape, layer.v->strides));
      }
      planes[1] = static_cast<std::byte*>(layer.v->data);
    } else {
      if (layer.kv.shape.size() != 5 || layer.kv.shape[0] != 2) {
        return Bad(l, fmt::format("kv tensor of shape {}; want [2, num_blocks, block_size, "
                                  "kv_heads, head_dim] or separate K and V tensors",
                                  layer.kv.shape));
      }
      dims = DimsOf(layer.kv, 1, false);
      plane_stride = layer.kv.strides[0];
      planes[1] = planes[0] + plane_stride * elem;
    }
    const uint32_t heads = mla ? 1 : layout.num_kv_heads;
    if (dims.size[2] != heads || dims.size[3] != layout.head_dim) {
      return Bad(l, fmt::format("{} kv heads of dim {}; the layout has {} of dim {}", dims.size[2],
                                dims.size[3], heads, layout.head_dim));
    }
    if (dims.size[3] > 1 && dims.stride[3] != 1) {
      return Bad(l, fmt::format("head_dim stride is {}; it must be 1", dims.stride[3]));
    }
    const Extent extent = PlaneExtent(dims);
    if (!extent.injective) {
      return Bad(l, fmt::format("strides {} make slots overlap", dims.stride));
    }
    if (layer.v.has_value()) {
      const auto* k = planes[0];
      const auto* v = planes[1];
      const int64_t bytes = extent.elems * elem;
      if (k < v + bytes && v < k + bytes) return Bad(l, "the K and V tensors overlap");
    } else if (!mla) {
      // Stacked planes may interleave (e.g. [num_blocks, 2, ...] physically); their elements
      // must still be distinct.
      const Extent stacked = ExtentOf({{2, plane_stride},
                                       {dims.size[0], dims.stride[0]},
                                       {dims.size[1], dims.stride[1]},
                                       {dims.size[2], dims.stride[2]}},
                                      dims.size[3]);
      if (!stacked.injective) {
        return Bad(l, fmt::format("strides {} make the K and V planes overlap", layer.kv.strides));
      }
    }
    if (l == 0) {
      first_dims = dims;
      first_plane_stride = plane_stride;
      cache.plane_extent_bytes = static_cast<uint64_t>(extent.elems) * elem;
    } else if (!(dims == first_dims) || plane_stride != first_plane_stride) {
      return Bad(l, "its geometry (shape or strides) differs from layer 0's");
    }
    cache.planes[l] = planes;
  }
  PagedKvGeometry& g = cache.geometry;
  g.num_planes = layout.planes_per_layer();
  g.num_blocks = first_dims.size[0];
  g.block_size = first_dims.size[1];
  g.num_kv_heads = static_cast<uint32_t>(first_dims.size[2]);
  g.head_dim = static_cast<uint32_t>(first_dims.size[3]);
  g.elem_bytes = elem;
  g.block_stride_bytes = first_dims.stride[0] * elem;
  g.slot_stride_bytes = first_dims.stride[1] * elem;
  g.head_stride_bytes = first_dims.stride[2] * elem;
  return cache;
}

}  // namespace strata::connector::internal
