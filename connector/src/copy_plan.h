// Copy plans between an engine's paged KV (PagedKvCache) and chunks in the shared arena.
//
// A chunk's payload is layer-major [layer][plane][token][kv_head][head_dim] (core/kv_layout.h)
// and lies in the arena as an ordered list of extents; payload offset x is found by walking the
// extents, so a layer or a token row may straddle two extents. On the engine side token position
// p lives in slot p % block_size of block block_ids[p / block_size]. A plan for one layer is a
// list of contiguous runs (storage::CopyRun): with the packed [num_blocks, block_size, kv_heads,
// head_dim] layout the tokens of one block are adjacent, so a layer of a 256-token chunk is a
// handful of large runs per plane; strided layouts (HND, padded slots) fall back to one run per
// token row or per head. Adjacent runs are merged when both sides continue.
//
// Pure functions over plain values; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "connector/src/engine_client.h"
#include "connector/src/paged_kv.h"
#include "core/kv_layout.h"
#include "storage/device/device_runtime.h"

namespace strata::connector::internal {

// One chunk's part of a transfer: chunk tokens [token_begin, token_begin + num_tokens) of a
// chunk holding chunk_tokens tokens correspond to engine positions [position_begin,
// position_begin + num_tokens).
struct ChunkCopy {
  std::span<const ArenaExtent> extents;  // the chunk's payload in the arena, in order
  uint32_t chunk_tokens = 0;
  uint32_t token_begin = 0;
  uint32_t num_tokens = 0;
  int64_t position_begin = 0;
  std::span<const int32_t> block_ids;  // the request's blocks from position 0
};

enum class CopyDirection {
  kArenaToEngine,  // load
  kEngineToArena,  // save
};

// Checks that `extents` lie inside an arena of `arena_size_bytes`, none empty, and that their
// lengths sum to `total_bytes`. kInvalidArgument naming the first problem.
absl::Status ValidateExtents(std::span<const ArenaExtent> extents, uint64_t arena_size_bytes,
                             uint64_t total_bytes);

// Checks everything a plan for `chunk` will touch: 1 <= chunk_tokens <= layout.chunk_tokens, the
// token range inside the chunk, extents inside an arena of `arena_size_bytes` whose lengths sum
// to layout.chunk_bytes(chunk_tokens), block_ids covering the positions, every block id named in
// [0, num_blocks). kInvalidArgument naming the first problem.
absl::Status ValidateChunkCopy(const KvLayout& layout, const PagedKvCache& cache,
                               uint64_t arena_size_bytes, const ChunkCopy& chunk);

// Appends the runs that copy layer `layer` (every plane) of `chunk` in `direction` to `runs`,
// merging with the last run when both sides continue it. `chunk` must have passed
// ValidateChunkCopy against the same layout, cache and arena. With `whole_payload` (loads
// only) the runs cover the layer's whole payload in payload order: the parts outside the
// chunk's token range come as runs with a null dst, to be digested but not copied, so the
// runs of every layer in turn read the chunk's payload exactly once, in order (what its
// checksum covers).
void AppendLayerRuns(const KvLayout& layout, const PagedKvCache& cache, std::byte* arena_base,
                     const ChunkCopy& chunk, uint32_t layer, CopyDirection direction,
                     std::vector<storage::CopyRun>& runs, bool whole_payload = false);

}  // namespace strata::connector::internal
