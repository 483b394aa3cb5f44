#include "connector/src/copy_plan.h"

#include <algorithm>

#include "core/fmt_absl.h"
#include "fmt/format.h"

namespace strata::connector::internal {
namespace {

// Appends a run, merged into the last one when both sides continue it (a null dst, a run that
// is only digested, continues only another such run).
void AppendRun(const void* src, void* dst, uint64_t size, std::vector<storage::CopyRun>& runs) {
  if (!runs.empty()) {
    storage::CopyRun& last = runs.back();
    const bool dst_continues =
        dst == nullptr
            ? last.dst == nullptr
            : last.dst != nullptr && static_cast<std::byte*>(last.dst) + last.size_bytes == dst;
    if (static_cast<const std::byte*>(last.src) + last.size_bytes == src && dst_continues) {
      last.size_bytes += size;
      return;
    }
  }
  runs.push_back({src, dst, size});
}

// Emits the copy of `size` payload bytes at payload offset `offset` to or from the engine bytes
// at `engine`, splitting it where the payload crosses from one extent to the next.
class PayloadWriter {
 public:
  PayloadWriter(std::span<const ArenaExtent> extents, std::byte* arena_base,
                CopyDirection direction, std::vector<storage::CopyRun>& runs)
      : extents_(extents), arena_base_(arena_base), direction_(direction), runs_(runs) {}

  // A null `engine` (loads only) emits runs that only read the payload: digested, not copied.
  void Copy(uint64_t offset, std::byte* engine, uint64_t size) {
    // Payload offsets of one layer are visited in increasing order: walk forward from the last
    // extent, and back to the start only if asked for an earlier offset.
    if (offset < extent_start_) {
      index_ = 0;
      extent_start_ = 0;
    }
    while (size > 0) {
      while (offset >= extent_start_ + extents_[index_].length) {
        extent_start_ += extents_[index_].length;
        ++index_;
      }
      const ArenaExtent& extent = extents_[index_];
      const uint64_t within = offset - extent_start_;
      const uint64_t piece = std::min(size, extent.length - within);
      std::byte* arena = arena_base_ + extent.offset + within;
      if (direction_ == CopyDirection::kArenaToEngine) {
        AppendRun(arena, engine, piece, runs_);
      } else {
        AppendRun(engine, arena, piece, runs_);
      }
      offset += piece;
      if (engine != nullptr) engine += piece;
      size -= piece;
    }
  }

 private:
  const std::span<const ArenaExtent> extents_;
  std::byte* const arena_base_;
  const CopyDirection direction_;
  std::vector<storage::CopyRun>& runs_;
  size_t index_ = 0;
  uint64_t extent_start_ = 0;
};

}  // namespace

absl::Status ValidateExtents(std::span<const ArenaExtent> extents, uint64_t arena_size_bytes,
                             uint64_t total_bytes) {
  uint64_t total = 0;
  for (const ArenaExtent& extent : extents) {
    if (extent.length == 0 || extent.offset > arena_size_bytes ||
        extent.length > arena_size_bytes - extent.offset) {
      return absl::InvalidArgumentError(
          fmt::format("extent [{}, +{}) outside the arena of {} bytes", extent.offset,
                      extent.length, arena_size_bytes));
    }
    total += extent.length;
  }
  if (total != total_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("extents hold {} bytes, not {}", total, total_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateChunkCopy(const KvLayout& layout, const PagedKvCache& cache,
                               uint64_t arena_size_bytes, const ChunkCopy& chunk) {
  const PagedKvGeometry& g = cache.geometry;
  if (chunk.chunk_tokens == 0 || chunk.chunk_tokens > layout.chunk_tokens) {
    return absl::InvalidArgumentError(fmt::format("chunk of {} tokens; chunks hold 1 to {}",
                                                  chunk.chunk_tokens, layout.chunk_tokens));
  }
  if (chunk.num_tokens == 0 || chunk.token_begin > chunk.chunk_tokens ||
      chunk.num_tokens > chunk.chunk_tokens - chunk.token_begin) {
    return absl::InvalidArgumentError(
        fmt::format("tokens [{}, {}) outside a chunk of {}", chunk.token_begin,
                    uint64_t{chunk.token_begin} + chunk.num_tokens, chunk.chunk_tokens));
  }
  if (absl::Status s =
          ValidateExtents(chunk.extents, arena_size_bytes, layout.chunk_bytes(chunk.chunk_tokens));
      !s.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("{} (a chunk of {} tokens)", s.message(), chunk.chunk_tokens));
  }
  if (chunk.position_begin < 0) {
    return absl::InvalidArgumentError(fmt::format("negative position {}", chunk.position_begin));
  }
  const int64_t first_block = chunk.position_begin / g.block_size;
  const int64_t last_block = (chunk.position_begin + chunk.num_tokens - 1) / g.block_size;
  if (last_block >= static_cast<int64_t>(chunk.block_ids.size())) {
    return absl::InvalidArgumentError(fmt::format("positions up to {} need {} blocks; {} given",
                                                  chunk.position_begin + chunk.num_tokens,
                                                  last_block + 1, chunk.block_ids.size()));
  }
  for (int64_t b = first_block; b <= last_block; ++b) {
    const int32_t id = chunk.block_ids[b];
    if (id < 0 || id >= g.num_blocks) {
      return absl::InvalidArgumentError(
          fmt::format("block id {} outside [0, {})", id, g.num_blocks));
    }
  }
  if (g.page_bytes != 0 &&
      (chunk.chunk_tokens % g.block_size != 0 || chunk.token_begin % g.block_size != 0 ||
       chunk.num_tokens % g.block_size != 0 || chunk.position_begin % g.block_size != 0)) {
    return absl::InvalidArgumentError(fmt::format(
        "tokens [{}, {}) of a chunk of {} at position {}: opaque blocks of {} are copied whole",
        chunk.token_begin, uint64_t{chunk.token_begin} + chunk.num_tokens, chunk.chunk_tokens,
        chunk.position_begin, g.block_size));
  }
  return absl::OkStatus();
}

void AppendLayerRuns(const KvLayout& layout, const PagedKvCache& cache, std::byte* arena_base,
                     const ChunkCopy& chunk, uint32_t layer, CopyDirection direction,
                     std::vector<storage::CopyRun>& runs, bool whole_payload) {
  const PagedKvGeometry& g = cache.geometry;
  const uint64_t row = g.row_bytes();
  const bool slots_contiguous = g.slots_contiguous();
  const bool row_contiguous = g.row_contiguous();
  PayloadWriter writer(chunk.extents, arena_base, direction, runs);
  if (g.page_bytes != 0) {
    // Opaque pages: the layer's payload is the chunk's blocks' pages, in order.
    const uint64_t layer_offset = layout.plane_offset(layer, 0, chunk.chunk_tokens);
    const uint32_t first = chunk.token_begin / g.block_size;
    const uint32_t end = (chunk.token_begin + chunk.num_tokens) / g.block_size;
    const uint32_t pages = chunk.chunk_tokens / g.block_size;
    if (whole_payload && first > 0) writer.Copy(layer_offset, nullptr, first * g.page_bytes);
    for (uint32_t p = first; p < end; ++p) {
      const int64_t block = chunk.block_ids[chunk.position_begin / g.block_size + (p - first)];
      writer.Copy(layer_offset + p * g.page_bytes,
                  cache.planes[layer][0] + block * g.block_stride_bytes, g.page_bytes);
    }
    if (whole_payload && end < pages) {
      writer.Copy(layer_offset + end * g.page_bytes, nullptr, (pages - end) * g.page_bytes);
    }
    return;
  }
  for (uint32_t plane = 0; plane < g.num_planes; ++plane) {
    std::byte* const base = cache.planes[layer][plane];
    const uint64_t plane_offset = layout.plane_offset(layer, plane, chunk.chunk_tokens);
    const uint32_t token_end = chunk.token_begin + chunk.num_tokens;
    if (whole_payload && chunk.token_begin > 0) {
      writer.Copy(plane_offset, nullptr, uint64_t{chunk.token_begin} * row);
    }
    uint32_t t = 0;
    while (t < chunk.num_tokens) {
      const int64_t position = chunk.position_begin + t;
      const int64_t slot = position % g.block_size;
      const int64_t block = chunk.block_ids[position / g.block_size];
      std::byte* engine = base + block * g.block_stride_bytes + slot * g.slot_stride_bytes;
      const uint64_t payload = plane_offset + uint64_t{chunk.token_begin + t} * row;
      if (slots_contiguous) {
        const uint32_t count =
            static_cast<uint32_t>(std::min<int64_t>(chunk.num_tokens - t, g.block_size - slot));
        writer.Copy(payload, engine, count * row);
        t += count;
      } else if (row_contiguous) {
        writer.Copy(payload, engine, row);
        ++t;
      } else {
        for (uint32_t h = 0; h < g.num_kv_heads; ++h) {
          writer.Copy(payload + h * g.head_bytes(), engine + h * g.head_stride_bytes,
                      g.head_bytes());
        }
        ++t;
      }
    }
    if (whole_payload && token_end < chunk.chunk_tokens) {
      writer.Copy(plane_offset + uint64_t{token_end} * row, nullptr,
                  uint64_t{chunk.chunk_tokens - token_end} * row);
    }
  }
}

}  // namespace strata::connector::internal
