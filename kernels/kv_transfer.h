// Gather and scatter between an engine's paged KV cache and Strata's chunk layout.
//
// Engine side: one tensor per layer and plane (K, V; or a single MLA latent plane), each a 4-D
// strided array [num_blocks, block_size, num_kv_heads, head_dim] described by PagedKvSpec (shared
// by all layers) and PagedKvLayer (the layer's plane pointers and extents). vLLM's FlashAttention
// tensor [2, num_blocks, block_size, kv_heads, head_dim] is two planes of one allocation (see
// PagedKvLayer::FromStackedPlanes); its HND stride order (0,1,3,2,4) is ContiguousHnd; separate
// K and V tensors are FromSeparatePlanes.
//
// Strata side: a chunk is one buffer laid out as KvLayout says, layer-major
// [layer][plane][token][kv_head][head_dim], dense, holding `chunk_tokens` tokens.
//
// A TransferPlan is built (and fully validated) once for a batch of chunks: which tokens of which
// chunk go to which engine slot, through a block table. GatherKv (engine -> chunks, the store path)
// and ScatterKv (chunks -> engine, the load path) then copy any contiguous range of layers; the
// per-layer forms serve the layer-wise pipeline. Copies are bit-exact; dtypes must match.
//
// Thread-safety: a TransferPlan is immutable and may be shared; the copy functions are reentrant
// but concurrent calls must not write the same memory.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"

namespace strata::kernels {

// Geometry and element strides of one plane of an engine's paged KV cache; every plane of every
// layer shares it.
struct PagedKvSpec {
  KvDtype dtype = KvDtype::kBfloat16;
  int64_t num_planes = 2;  // 2: K and V; 1: an MLA latent
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  // Element strides of [block, slot, head, dim].
  int64_t block_stride = 0;
  int64_t slot_stride = 0;
  int64_t head_stride = 0;
  int64_t dim_stride = 1;

  // [num_blocks, block_size, num_kv_heads, head_dim] row-major (vLLM NHD).
  static PagedKvSpec Contiguous(KvDtype dtype, int64_t num_planes, int64_t num_blocks,
                                int64_t block_size, int64_t num_kv_heads, int64_t head_dim);
  // Physically [num_blocks, num_kv_heads, block_size, head_dim] (vLLM HND stride order).
  static PagedKvSpec ContiguousHnd(KvDtype dtype, int64_t num_planes, int64_t num_blocks,
                                   int64_t block_size, int64_t num_kv_heads, int64_t head_dim);

  // Positive dims (num_planes 1 or 2), a float dtype, non-negative strides whose offsets fit in
  // int64; when `writable`, planes whose elements do not overlap.
  absl::Status Validate(bool writable) const;
  // Number of elements a plane pointer must address: the largest reachable offset plus one.
  // Meaningful after Validate succeeded.
  int64_t PlaneExtentElems() const;
  // Element offset of (block, slot) inside a plane.
  int64_t SlotOffset(int64_t block, int64_t slot) const {
    return block * block_stride + slot * slot_stride;
  }
};

// One layer of the engine's paged KV: for each plane, the address of element [0,0,0,0] and how
// many elements of the spec's dtype are addressable from it.
struct PagedKvLayer {
  std::array<void*, 2> planes{};
  std::array<int64_t, 2> extent_elems{};

  // Planes p = 0..num_planes-1 at `base + p * plane_stride_elems` inside one allocation of
  // `total_elems` elements (vLLM's [2, num_blocks, ...] tensor: plane_stride = its stride(0)).
  static PagedKvLayer FromStackedPlanes(void* base, KvDtype dtype, int64_t num_planes,
                                        int64_t plane_stride_elems, int64_t total_elems);
  // Separate allocations; `v` is ignored (and may be null) for a one-plane cache.
  static PagedKvLayer FromSeparatePlanes(void* k, int64_t k_extent_elems, void* v,
                                         int64_t v_extent_elems);
};

// Geometry of the chunks of a transfer (all chunks of one batch share it).
struct ChunkGeometry {
  KvDtype dtype = KvDtype::kBfloat16;
  int64_t num_layers = 0;
  int64_t num_planes = 2;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;

  // The geometry of chunks with `layout` (MHA: 2 planes, MLA latent: 1 plane).
  static ChunkGeometry FromKvLayout(const KvLayout& layout);
  // Elements of one token of one plane of one layer.
  int64_t token_elems() const { return num_kv_heads * head_dim; }
  // Element offset of (layer, plane, token) in a chunk holding `chunk_tokens` tokens; equals
  // KvLayout::plane_offset / element size + token * token_elems().
  int64_t TokenOffset(int64_t chunk_tokens, int64_t layer, int64_t plane, int64_t token) const {
    return ((layer * num_planes + plane) * chunk_tokens + token) * token_elems();
  }
};

// One chunk's part of a transfer: chunk tokens [token_begin, token_begin + num_tokens) map, in
// order, to consecutive engine slots starting at slot `slot_begin` of the block named by
// block_table[block_table_begin] and continuing through the following block-table entries.
struct ChunkCopy {
  void* chunk = nullptr;          // the chunk buffer (host or device, as the entry point says)
  int64_t chunk_tokens = 0;       // tokens the chunk holds: sets its layout
  int64_t token_begin = 0;        // first chunk token copied
  int64_t num_tokens = 0;         // tokens copied (>= 1)
  int64_t block_table_begin = 0;  // index into the plan's block table
  int64_t slot_begin = 0;         // slot of token_begin within its block, in [0, block_size)
};

// A validated batch: the per-token copy list of a set of ChunkCopy entries. Immutable.
class TransferPlan {
 public:
  struct Chunk {
    void* data = nullptr;
    int64_t chunk_tokens = 0;
  };
  // Token `token` of chunk `chunk` <-> the engine slot at element offset `slot_offset` of a plane.
  struct TokenOp {
    int32_t chunk = 0;
    int32_t token = 0;
    int64_t slot_offset = 0;
  };

  // Validates everything a copy will touch: the spec (writable) and geometry (they must agree on
  // dtype, planes, heads and head_dim), every chunk pointer and token range, every block-table
  // index and block id (in [0, num_blocks)), and that no engine slot and no chunk token is named
  // twice and no two distinct chunk buffers overlap. kInvalidArgument on any violation.
  static absl::StatusOr<TransferPlan> Create(const PagedKvSpec& paged,
                                             const ChunkGeometry& geometry,
                                             std::span<const ChunkCopy> copies,
                                             std::span<const int32_t> block_table);

  const PagedKvSpec& paged() const { return paged_; }
  const ChunkGeometry& geometry() const { return geometry_; }
  std::span<const Chunk> chunks() const { return chunks_; }
  std::span<const TokenOp> ops() const { return ops_; }

  // Layers [first_layer, first_layer + layers.size()) exist in the chunks, layers is non-empty,
  // and each layer has non-null plane pointers whose extents cover PlaneExtentElems().
  absl::Status ValidateLayers(std::span<const PagedKvLayer> layers, int64_t first_layer) const;

 private:
  PagedKvSpec paged_;
  ChunkGeometry geometry_;
  std::vector<Chunk> chunks_;
  std::vector<TokenOp> ops_;
};

namespace internal {
// TransferPlan::ValidateLayers for any holder of a validated spec and geometry (the CUDA plan).
absl::Status ValidateTransferLayers(const PagedKvSpec& paged, const ChunkGeometry& geometry,
                                    std::span<const PagedKvLayer> layers, int64_t first_layer);
}  // namespace internal

// Copies layers [first_layer, first_layer + layers.size()) of every planned token from the engine's
// paged KV (layers[i] is layer first_layer + i) into the chunks. Host memory. kInvalidArgument
// (nothing copied) when ValidateLayers fails.
absl::Status GatherKv(const TransferPlan& plan, std::span<const PagedKvLayer> layers,
                      int64_t first_layer);
// The reverse: chunks -> engine paged KV.
absl::Status ScatterKv(const TransferPlan& plan, std::span<const PagedKvLayer> layers,
                       int64_t first_layer);

// One layer (the layer-wise pipeline's step).
inline absl::Status GatherKvLayer(const TransferPlan& plan, const PagedKvLayer& layer,
                                  int64_t layer_index) {
  return GatherKv(plan, std::span<const PagedKvLayer>(&layer, 1), layer_index);
}
inline absl::Status ScatterKvLayer(const TransferPlan& plan, const PagedKvLayer& layer,
                                   int64_t layer_index) {
  return ScatterKv(plan, std::span<const PagedKvLayer>(&layer, 1), layer_index);
}

}  // namespace strata::kernels
