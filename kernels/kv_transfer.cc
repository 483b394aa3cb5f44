#include "kernels/kv_transfer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/internal/validate.h"
#include "kernels/tensor_view.h"

namespace strata::kernels {
namespace {

using internal::CheckDim;
using internal::Invalid;

enum class Direction { kPagedToChunk, kChunkToPaged };

// Copies `elems` elements between a dense chunk token and a strided paged token.
void CopyToken(std::byte* chunk, std::byte* paged, const PagedKvSpec& spec, int64_t elem_bytes,
               Direction direction) {
  const int64_t heads = spec.num_kv_heads;
  const int64_t dim = spec.head_dim;
  auto copy = [direction](std::byte* c, std::byte* p, size_t bytes) {
    if (direction == Direction::kPagedToChunk) {
      std::memcpy(c, p, bytes);
    } else {
      std::memcpy(p, c, bytes);
    }
  };
  if (spec.dim_stride == 1 && (heads == 1 || spec.head_stride == dim)) {
    copy(chunk, paged, static_cast<size_t>(heads * dim * elem_bytes));
    return;
  }
  for (int64_t h = 0; h < heads; ++h) {
    std::byte* c = chunk + h * dim * elem_bytes;
    std::byte* p = paged + h * spec.head_stride * elem_bytes;
    if (spec.dim_stride == 1) {
      copy(c, p, static_cast<size_t>(dim * elem_bytes));
      continue;
    }
    for (int64_t d = 0; d < dim; ++d) {
      copy(c + d * elem_bytes, p + d * spec.dim_stride * elem_bytes,
           static_cast<size_t>(elem_bytes));
    }
  }
}

absl::Status Copy(const TransferPlan& plan, std::span<const PagedKvLayer> layers,
                  int64_t first_layer, Direction direction) {
  STRATA_RETURN_IF_ERROR(plan.ValidateLayers(layers, first_layer));
  const PagedKvSpec& spec = plan.paged();
  const ChunkGeometry& geometry = plan.geometry();
  const int64_t elem_bytes = DtypeSizeBytes(spec.dtype);
  for (size_t i = 0; i < layers.size(); ++i) {
    const int64_t layer = first_layer + static_cast<int64_t>(i);
    for (int64_t plane = 0; plane < spec.num_planes; ++plane) {
      auto* paged_base = static_cast<std::byte*>(layers[i].planes[plane]);
      for (const TransferPlan::TokenOp& op : plan.ops()) {
        const TransferPlan::Chunk& chunk = plan.chunks()[op.chunk];
        std::byte* chunk_token =
            static_cast<std::byte*>(chunk.data) +
            geometry.TokenOffset(chunk.chunk_tokens, layer, plane, op.token) * elem_bytes;
        CopyToken(chunk_token, paged_base + op.slot_offset * elem_bytes, spec, elem_bytes,
                  direction);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

PagedKvSpec PagedKvSpec::Contiguous(KvDtype dtype, int64_t num_planes, int64_t num_blocks,
                                    int64_t block_size, int64_t num_kv_heads, int64_t head_dim) {
  return {dtype,
          num_planes,
          num_blocks,
          block_size,
          num_kv_heads,
          head_dim,
          SaturatingMul(block_size, SaturatingMul(num_kv_heads, head_dim)),
          SaturatingMul(num_kv_heads, head_dim),
          head_dim,
          1};
}

PagedKvSpec PagedKvSpec::ContiguousHnd(KvDtype dtype, int64_t num_planes, int64_t num_blocks,
                                       int64_t block_size, int64_t num_kv_heads, int64_t head_dim) {
  return {dtype,
          num_planes,
          num_blocks,
          block_size,
          num_kv_heads,
          head_dim,
          SaturatingMul(block_size, SaturatingMul(num_kv_heads, head_dim)),
          head_dim,
          SaturatingMul(block_size, head_dim),
          1};
}

absl::Status PagedKvSpec::Validate(bool writable) const {
  STRATA_RETURN_IF_ERROR(internal::CheckFloatDtype(dtype, "paged KV"));
  if (num_planes != 1 && num_planes != 2) {
    return Invalid("paged KV", fmt::format("num_planes {} is not 1 or 2", num_planes));
  }
  STRATA_RETURN_IF_ERROR(CheckDim(num_blocks, "paged KV num_blocks"));
  STRATA_RETURN_IF_ERROR(CheckDim(block_size, "paged KV block_size"));
  STRATA_RETURN_IF_ERROR(CheckDim(num_kv_heads, "paged KV num_kv_heads"));
  STRATA_RETURN_IF_ERROR(CheckDim(head_dim, "paged KV head_dim"));
  STRATA_RETURN_IF_ERROR(internal::MaxOffset({{num_blocks, block_stride},
                                              {block_size, slot_stride},
                                              {num_kv_heads, head_stride},
                                              {head_dim, dim_stride}},
                                             "paged KV strides")
                             .status());
  if (writable) {
    STRATA_RETURN_IF_ERROR(internal::CheckNoOverlap({{num_blocks, block_stride},
                                                     {block_size, slot_stride},
                                                     {num_kv_heads, head_stride},
                                                     {head_dim, dim_stride}},
                                                    "paged KV strides"));
  }
  return absl::OkStatus();
}

int64_t PagedKvSpec::PlaneExtentElems() const {
  return (num_blocks - 1) * block_stride + (block_size - 1) * slot_stride +
         (num_kv_heads - 1) * head_stride + (head_dim - 1) * dim_stride + 1;
}

PagedKvLayer PagedKvLayer::FromStackedPlanes(void* base, KvDtype dtype, int64_t num_planes,
                                             int64_t plane_stride_elems, int64_t total_elems) {
  PagedKvLayer layer;
  for (int64_t p = 0; p < num_planes && p < 2; ++p) {
    layer.planes[p] =
        static_cast<std::byte*>(base) + p * plane_stride_elems * DtypeSizeBytes(dtype);
    layer.extent_elems[p] = total_elems - p * plane_stride_elems;
  }
  return layer;
}

PagedKvLayer PagedKvLayer::FromSeparatePlanes(void* k, int64_t k_extent_elems, void* v,
                                              int64_t v_extent_elems) {
  PagedKvLayer layer;
  layer.planes = {k, v};
  layer.extent_elems = {k_extent_elems, v_extent_elems};
  return layer;
}

ChunkGeometry ChunkGeometry::FromKvLayout(const KvLayout& layout) {
  return {layout.dtype, layout.num_layers, layout.planes_per_layer(), layout.num_kv_heads,
          layout.head_dim};
}

absl::StatusOr<TransferPlan> TransferPlan::Create(const PagedKvSpec& paged,
                                                  const ChunkGeometry& geometry,
                                                  std::span<const ChunkCopy> copies,
                                                  std::span<const int32_t> block_table) {
  STRATA_RETURN_IF_ERROR(paged.Validate(/*writable=*/true));
  STRATA_RETURN_IF_ERROR(CheckDim(geometry.num_layers, "chunk num_layers"));
  if (geometry.dtype != paged.dtype) {
    return Invalid("chunk geometry",
                   fmt::format("dtype {} differs from the paged KV dtype {}",
                               DtypeName(geometry.dtype), DtypeName(paged.dtype)));
  }
  if (geometry.num_planes != paged.num_planes || geometry.num_kv_heads != paged.num_kv_heads ||
      geometry.head_dim != paged.head_dim) {
    return Invalid("chunk geometry",
                   fmt::format("planes/heads/head_dim {}/{}/{} differ from the paged KV's {}/{}/{}",
                               geometry.num_planes, geometry.num_kv_heads, geometry.head_dim,
                               paged.num_planes, paged.num_kv_heads, paged.head_dim));
  }
  if (copies.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Invalid("transfer", "too many chunks");
  }
  const int64_t elem_bytes = DtypeSizeBytes(paged.dtype);
  STRATA_ASSIGN_OR_RETURN(const int64_t layer_token_elems,
                          internal::CheckedMul(geometry.num_layers * geometry.num_planes,
                                               geometry.token_elems(), "chunk size"));

  TransferPlan plan;
  plan.paged_ = paged;
  plan.geometry_ = geometry;
  plan.chunks_.reserve(copies.size());
  struct Range {
    uintptr_t begin;
    uintptr_t end;
    int64_t chunk_tokens;
  };
  std::vector<Range> ranges;
  std::vector<std::pair<uintptr_t, int64_t>> chunk_tokens_used;  // (chunk address, token)
  std::vector<int64_t> slots_used;                               // block * block_size + slot
  int64_t total_ops = 0;
  for (size_t c = 0; c < copies.size(); ++c) {
    const ChunkCopy& copy = copies[c];
    const std::string what = fmt::format("chunk copy {}", c);
    STRATA_RETURN_IF_ERROR(internal::CheckNotNull(copy.chunk, what));
    STRATA_RETURN_IF_ERROR(CheckDim(copy.chunk_tokens, what + " chunk_tokens"));
    STRATA_RETURN_IF_ERROR(CheckDim(copy.num_tokens, what + " num_tokens"));
    if (copy.token_begin < 0 || copy.token_begin > copy.chunk_tokens - copy.num_tokens) {
      return Invalid(what, fmt::format("tokens [{}, +{}) outside the chunk's {} tokens",
                                       copy.token_begin, copy.num_tokens, copy.chunk_tokens));
    }
    if (copy.slot_begin < 0 || copy.slot_begin >= paged.block_size) {
      return Invalid(
          what, fmt::format("slot_begin {} outside [0, {})", copy.slot_begin, paged.block_size));
    }
    const int64_t blocks_spanned = (copy.slot_begin + copy.num_tokens - 1) / paged.block_size + 1;
    if (copy.block_table_begin < 0 ||
        copy.block_table_begin > static_cast<int64_t>(block_table.size()) - blocks_spanned) {
      return Invalid(what, fmt::format("block-table entries [{}, +{}) outside the table of {}",
                                       copy.block_table_begin, blocks_spanned, block_table.size()));
    }
    STRATA_ASSIGN_OR_RETURN(const int64_t chunk_elems,
                            internal::CheckedMul(layer_token_elems, copy.chunk_tokens, what));
    STRATA_ASSIGN_OR_RETURN(const int64_t chunk_bytes,
                            internal::CheckedMul(chunk_elems, elem_bytes, what));
    const auto begin = reinterpret_cast<uintptr_t>(copy.chunk);
    if (begin > std::numeric_limits<uintptr_t>::max() - static_cast<uintptr_t>(chunk_bytes)) {
      return Invalid(what, "chunk buffer wraps the address space");
    }
    ranges.push_back({begin, begin + static_cast<uintptr_t>(chunk_bytes), copy.chunk_tokens});
    STRATA_ASSIGN_OR_RETURN(total_ops, internal::CheckedAdd(total_ops, copy.num_tokens, what));
    if (total_ops > internal::kMaxDim) return Invalid("transfer", "too many tokens");

    plan.chunks_.push_back({copy.chunk, copy.chunk_tokens});
    for (int64_t i = 0; i < copy.num_tokens; ++i) {
      const int64_t linear = copy.slot_begin + i;
      const int64_t entry = copy.block_table_begin + linear / paged.block_size;
      const int64_t block = block_table[static_cast<size_t>(entry)];
      const int64_t slot = linear % paged.block_size;
      if (block < 0 || block >= paged.num_blocks) {
        return Invalid(what, fmt::format("block table entry {} holds block id {}, outside [0, {})",
                                         entry, block, paged.num_blocks));
      }
      plan.ops_.push_back({static_cast<int32_t>(c), static_cast<int32_t>(copy.token_begin + i),
                           paged.SlotOffset(block, slot)});
      slots_used.push_back(block * paged.block_size + slot);
      chunk_tokens_used.emplace_back(begin, copy.token_begin + i);
    }
  }

  std::sort(slots_used.begin(), slots_used.end());
  if (auto dup = std::adjacent_find(slots_used.begin(), slots_used.end());
      dup != slots_used.end()) {
    return Invalid("transfer", fmt::format("engine slot {} (block {}) is named twice", *dup,
                                           *dup / paged.block_size));
  }
  std::sort(chunk_tokens_used.begin(), chunk_tokens_used.end());
  if (auto dup = std::adjacent_find(chunk_tokens_used.begin(), chunk_tokens_used.end());
      dup != chunk_tokens_used.end()) {
    return Invalid("transfer", fmt::format("chunk token {} is named twice", dup->second));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin == ranges[i - 1].begin) {
      if (ranges[i].chunk_tokens != ranges[i - 1].chunk_tokens) {
        return Invalid("transfer", "one chunk buffer is given two different chunk_tokens");
      }
    } else if (ranges[i].begin < ranges[i - 1].end) {
      return Invalid("transfer", "two chunk buffers overlap");
    }
  }
  return plan;
}

absl::Status TransferPlan::ValidateLayers(std::span<const PagedKvLayer> layers,
                                          int64_t first_layer) const {
  return internal::ValidateTransferLayers(paged_, geometry_, layers, first_layer);
}

absl::Status internal::ValidateTransferLayers(const PagedKvSpec& paged,
                                              const ChunkGeometry& geometry,
                                              std::span<const PagedKvLayer> layers,
                                              int64_t first_layer) {
  if (layers.empty()) return Invalid("layers", "no layers given");
  if (first_layer < 0 || first_layer > geometry.num_layers ||
      static_cast<int64_t>(layers.size()) > geometry.num_layers - first_layer) {
    return Invalid("layers", fmt::format("layers [{}, +{}) outside the chunks' {} layers",
                                         first_layer, layers.size(), geometry.num_layers));
  }
  const int64_t extent = paged.PlaneExtentElems();
  for (size_t i = 0; i < layers.size(); ++i) {
    for (int64_t p = 0; p < paged.num_planes; ++p) {
      const std::string what = fmt::format("layer {} plane {}", first_layer + i, p);
      STRATA_RETURN_IF_ERROR(internal::CheckNotNull(layers[i].planes[p], what));
      STRATA_RETURN_IF_ERROR(internal::CheckExtent(extent - 1, layers[i].extent_elems[p], what));
    }
  }
  return absl::OkStatus();
}

absl::Status GatherKv(const TransferPlan& plan, std::span<const PagedKvLayer> layers,
                      int64_t first_layer) {
  return Copy(plan, layers, first_layer, Direction::kPagedToChunk);
}

absl::Status ScatterKv(const TransferPlan& plan, std::span<const PagedKvLayer> layers,
                       int64_t first_layer) {
  return Copy(plan, layers, first_layer, Direction::kChunkToPaged);
}

}  // namespace strata::kernels
