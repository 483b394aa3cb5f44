#include "connector/src/pic_plan.h"

#include <algorithm>
#include <limits>
#include <string>

#include "fmt/format.h"

namespace strata::connector {

absl::StatusOr<std::vector<int32_t>> PicBlockTable::AttentionTable(
    std::span<const int32_t> own_block_ids, int32_t engine_num_blocks) const {
  if (own_block_ids.size() != own_blocks) {
    return absl::InvalidArgumentError(
        fmt::format("the request needs {} own blocks, {} block ids were given", own_blocks,
                    own_block_ids.size()));
  }
  for (const int32_t id : own_block_ids) {
    if (id < 0 || id >= engine_num_blocks) {
      return absl::InvalidArgumentError(
          fmt::format("own block id {} is outside the engine's {} blocks", id, engine_num_blocks));
    }
  }
  std::vector<int32_t> table;
  table.reserve(blocks.size());
  for (const PicBlock& block : blocks) {
    if (!block.pool) {
      table.push_back(own_block_ids[block.index]);
      continue;
    }
    const int64_t id = int64_t{engine_num_blocks} + block.index;
    if (id > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          fmt::format("pool page {} after the engine's {} blocks overflows an int32 block id",
                      block.index, engine_num_blocks));
    }
    table.push_back(static_cast<int32_t>(id));
  }
  return table;
}

namespace internal {
namespace {

// The public chunk state is the internal source's values: a cast converts it.
static_assert(static_cast<int>(PicChunkState::kShared) ==
              static_cast<int>(PicChunkSource::kShared));
static_assert(static_cast<int>(PicChunkState::kWrite) == static_cast<int>(PicChunkSource::kWrite));
static_assert(static_cast<int>(PicChunkState::kPrivate) ==
              static_cast<int>(PicChunkSource::kPrivate));
static_assert(static_cast<int>(PicChunkState::kPending) ==
              static_cast<int>(PicChunkSource::kPending));

PicBlockTable BlockTableOf(const PicRequest& request, const PicPlan& plan, uint32_t block_tokens) {
  const size_t blocks = (plan.padded_tokens.size() + block_tokens - 1) / block_tokens;
  // Tokens of each block computed from layer 0.
  std::vector<uint32_t> recomputed(blocks, 0);
  for (const PicTokenSpan& span : plan.recompute_from_layer_zero) {
    for (uint32_t t = span.begin; t < span.end; ++t) ++recomputed[t / block_tokens];
  }
  // The pool page behind each block of a kShared chunk; a thinned chunk's dropped blocks have
  // none.
  std::vector<std::optional<uint32_t>> page(blocks);
  std::vector<bool> dropped(blocks, false);
  for (const PicChunk& chunk : plan.chunks) {
    if (chunk.state != PicChunkState::kShared) continue;
    const uint32_t first = chunk.padded.begin / block_tokens;
    if (chunk.pool_page_positions.empty()) {
      for (size_t k = 0; k < chunk.pool_pages.size(); ++k) page[first + k] = chunk.pool_pages[k];
      continue;
    }
    const uint32_t end = (chunk.padded.end + block_tokens - 1) / block_tokens;
    std::fill(dropped.begin() + first, dropped.begin() + end, true);
    for (size_t k = 0; k < chunk.pool_pages.size(); ++k) {
      const uint32_t j = first + chunk.pool_page_positions[k] / block_tokens;
      page[j] = chunk.pool_pages[k];
      dropped[j] = false;
    }
  }
  const bool copy_shared = request.policy.recompute == PicRecompute::kCacheBlend ||
                           (plan.pool.has_value() && plan.pool->keys_rotated);
  PicBlockTable table;
  table.blocks.reserve(blocks);
  for (size_t j = 0; j < blocks; ++j) {
    // A dropped block is gone, unless the policy recomputes it (whole: ThinnedChunkReadable).
    if (dropped[j] && recomputed[j] == 0) continue;
    PicBlock& block = table.blocks.emplace_back();
    block.position = static_cast<uint32_t>(j * block_tokens);
    if (page[j].has_value() && recomputed[j] == 0 && !copy_shared) {
      block.pool = true;
      block.index = *page[j];
      continue;
    }
    block.index = table.own_blocks++;
    if (page[j].has_value() && recomputed[j] < block_tokens) block.fill_from_page = page[j];
  }
  return table;
}

}  // namespace

PicPlan ToPicPlan(const PicRequest& request, uint32_t block_tokens, PositionalFormat positional) {
  PicPlan plan;
  plan.padded_tokens = request.prompt.padded_tokens;
  for (const PicChunkPlacement& placed : request.chunks) {
    const PicSegment& segment = request.prompt.segments[placed.segment];
    PicChunk& chunk = plan.chunks.emplace_back();
    chunk.padded = {segment.padded_begin, segment.padded_begin + segment.padded_tokens()};
    chunk.source = {segment.source_begin, segment.source_end};
    chunk.state = static_cast<PicChunkState>(placed.source);
    chunk.pool_pages = placed.pages;
    chunk.pool_page_positions = placed.positions;
    if (placed.source == PicChunkSource::kPrivate || placed.source == PicChunkSource::kPending) {
      chunk.why_private = std::string(placed.why_private.message());
    } else if (!plan.pool.has_value() && request.pool != nullptr) {
      const DevicePoolGrant& grant = request.pool->grant();
      plan.pool = PicPoolView{.base = reinterpret_cast<uintptr_t>(request.pool->base()),
                              .num_layers = grant.geometry.num_layers,
                              .num_pages = grant.geometry.num_pages,
                              .page_bytes = grant.geometry.page_bytes,
                              .layer_stride_bytes = grant.geometry.layer_stride_bytes(),
                              .block_tokens = grant.block_tokens,
                              .keys_rotated = positional == PositionalFormat::kRopeApplied};
    }
  }
  for (const PicTokenRange& range : request.recomputed_from_layer_zero(block_tokens)) {
    plan.recompute_from_layer_zero.push_back({range.begin, range.end});
  }
  plan.recomputed_tokens = request.recomputed_tokens(block_tokens);
  plan.compile_dummies = request.policy.compile_variant();
  plan.block_table = BlockTableOf(request, plan, block_tokens);
  return plan;
}

}  // namespace internal
}  // namespace strata::connector
