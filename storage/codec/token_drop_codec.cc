#include "storage/codec/token_drop_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/check.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "storage/codec/codec_checks.h"
#include "storage/codec/encoded_chunk.h"

namespace strata::storage {
namespace {

constexpr uint32_t kDefaultRecentShare = 8;  // recent_tokens 0: an eighth of the chunk

uint64_t Pad4(uint64_t bytes) { return (bytes + 3) / 4 * 4; }

uint32_t CeilDiv(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

// A chunk of `num_tokens` tokens in blocks of `block_tokens`.
struct Blocks {
  uint32_t block_tokens = 0;
  uint32_t num_tokens = 0;

  uint32_t count() const { return CeilDiv(num_tokens, block_tokens); }
  uint32_t first_token(uint32_t block) const { return block * block_tokens; }
  uint32_t length(uint32_t block) const {
    return std::min(block_tokens, num_tokens - first_token(block));
  }
  uint32_t TokensIn(std::span<const uint32_t> blocks) const {
    uint32_t tokens = 0;
    for (uint32_t b : blocks) tokens += length(b);
    return tokens;
  }
};

// Everything Encode checks but the payload and num_tokens; returns the block size.
absl::StatusOr<uint32_t> CheckedBlockTokens(CodecId id, const KvLayout& layout,
                                            const CodecParams& params) {
  const std::string_view name = CodecIdName(id);
  STRATA_RETURN_IF_ERROR(layout.Validate());
  if (layout.positional != PositionalFormat::kNope) {
    return absl::FailedPreconditionError(fmt::format(
        "codec {} drops tokens, which only KV whose keys are stored before RoPE may lose "
        "(positional=nope: attention rotates each kept key at its own position); this layout's "
        "keys carry their positions ({})",
        name, layout.DebugString()));
  }
  if (params.bits != 0) {
    return absl::InvalidArgumentError(fmt::format(
        "codec {} takes no bits (it keeps tokens as they are), got {}", name, params.bits));
  }
  STRATA_RETURN_IF_ERROR(internal::CheckNoEnergy(name, params));
  const uint32_t block_tokens =
      params.group_size == 0 ? kTokenDropDefaultBlockTokens : params.group_size;
  if (layout.chunk_tokens % block_tokens != 0) {
    return absl::InvalidArgumentError(
        fmt::format("codec {}: blocks of {} tokens (group_size) must divide the layout's "
                    "{}-token chunks",
                    name, block_tokens, layout.chunk_tokens));
  }
  if (id == CodecId::kDropSinkRecent && (params.heavy_tokens != 0 || !params.importance.empty())) {
    return absl::InvalidArgumentError(fmt::format(
        "codec {} keeps no heavy hitters: it takes no heavy_tokens or importance (drop_h2o does)",
        name));
  }
  if (id == CodecId::kDropH2o && params.importance.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "codec {} needs the importance of each token of the chunk, which the engine supplies",
        name));
  }
  return block_tokens;
}

// The blocks with the highest summed importance among those `keep` leaves out, `count` of them at
// most, marked in `keep`.
void KeepHeavyBlocks(const Blocks& blocks, std::span<const float> importance, uint32_t count,
                     std::vector<bool>& keep) {
  std::vector<std::pair<double, uint32_t>> candidates;
  for (uint32_t b = 0; b < blocks.count(); ++b) {
    if (keep[b]) continue;
    const auto first = importance.begin() + blocks.first_token(b);
    candidates.emplace_back(std::accumulate(first, first + blocks.length(b), 0.0), b);
  }
  count = std::min<uint32_t>(count, static_cast<uint32_t>(candidates.size()));
  // Highest score first; the earlier block wins a tie.
  std::partial_sort(candidates.begin(), candidates.begin() + count, candidates.end(),
                    [](const auto& a, const auto& b) {
                      return a.first != b.first ? a.first > b.first : a.second < b.second;
                    });
  for (uint32_t i = 0; i < count; ++i) keep[candidates[i].second] = true;
}

// One layer's section, checked: its block list and where each plane's kept rows lie.
struct Section {
  std::vector<uint32_t> blocks;
  uint32_t kept_tokens = 0;
  std::span<const std::byte> rows;  // every plane's rows, each padded to 4 bytes
  uint64_t plane_stride = 0;        // Pad4(kept_tokens * plane_token_bytes)
};

absl::StatusOr<Section> ReadSection(const EncodedChunk& chunk, const KvLayout& layout,
                                    const Blocks& blocks, uint32_t layer) {
  STRATA_RETURN_IF_ERROR(chunk.VerifySection(layer));
  const std::span<const std::byte> bytes = chunk.section(layer);
  const auto corrupt = [&](std::string_view why) {
    return absl::DataLossError(fmt::format("token-drop frame, layer {}: {}", layer, why));
  };
  uint32_t k = 0;
  if (bytes.size() < 4) return corrupt("no block count");
  std::memcpy(&k, bytes.data(), 4);
  // Encode keeps the sink block at least.
  if (k == 0 || k > blocks.count() || bytes.size() < 4 + 4ull * k) {
    return corrupt(fmt::format("{} kept blocks of {}", k, blocks.count()));
  }
  Section section;
  section.blocks.resize(k);
  std::memcpy(section.blocks.data(), bytes.data() + 4, 4ull * k);
  for (uint32_t i = 0; i < k; ++i) {
    if (section.blocks[i] >= blocks.count() ||
        (i > 0 && section.blocks[i] <= section.blocks[i - 1])) {
      return corrupt("kept blocks out of order or out of the chunk");
    }
  }
  section.kept_tokens = blocks.TokensIn(section.blocks);
  section.plane_stride = Pad4(section.kept_tokens * layout.plane_token_bytes());
  section.rows = bytes.subspan(4 + 4ull * k);
  if (section.rows.size() != section.plane_stride * layout.planes_per_layer()) {
    return corrupt(fmt::format("{} bytes of rows, {} kept tokens need {}", section.rows.size(),
                               section.kept_tokens,
                               section.plane_stride * layout.planes_per_layer()));
  }
  return section;
}

// The frame's blocks: its group_size must be a block size of the layout.
absl::StatusOr<Blocks> FrameBlocks(const EncodedChunk& chunk, const KvLayout& layout) {
  const uint32_t block_tokens = chunk.header().group_size;
  if (block_tokens == 0 || layout.chunk_tokens % block_tokens != 0) {
    return absl::DataLossError(fmt::format(
        "token-drop frame: blocks of {} tokens do not divide the layout's {}-token chunks",
        block_tokens, layout.chunk_tokens));
  }
  return Blocks{.block_tokens = block_tokens, .num_tokens = chunk.header().num_tokens};
}

// Layer `layer` of a frame that kept every token, into `out` (the layer's bytes).
absl::Status DecodeWholeLayer(CodecId id, const EncodedChunk& chunk, const KvLayout& layout,
                              uint32_t layer, std::span<std::byte> out) {
  STRATA_ASSIGN_OR_RETURN(const Blocks blocks, FrameBlocks(chunk, layout));
  STRATA_ASSIGN_OR_RETURN(const Section section, ReadSection(chunk, layout, blocks, layer));
  if (section.kept_tokens != blocks.num_tokens) {
    return absl::FailedPreconditionError(fmt::format(
        "codec {} kept {} of this chunk's {} tokens: dropped tokens cannot be restored (only the "
        "kept ones can be read, at their positions)",
        CodecIdName(id), section.kept_tokens, blocks.num_tokens));
  }
  const uint64_t plane_bytes = blocks.num_tokens * layout.plane_token_bytes();
  for (uint32_t p = 0; p < layout.planes_per_layer(); ++p) {
    std::memcpy(out.data() + p * plane_bytes, section.rows.data() + p * section.plane_stride,
                plane_bytes);
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> KeptTokens::BlockPositions() const {
  std::vector<int64_t> positions;
  positions.reserve(blocks.size());
  for (uint32_t b : blocks) positions.push_back(int64_t{b} * block_tokens);
  return positions;
}

TokenDropCodec::TokenDropCodec(CodecId id) : id_(id) {
  STRATA_CHECK(id == CodecId::kDropSinkRecent || id == CodecId::kDropH2o);
}

std::string_view TokenDropCodec::error_bound() const {
  return "kept tokens exact, in whole blocks; the others dropped (no per-element bound: the "
         "attention output over the kept tokens at their positions is what changes)";
}

absl::Status TokenDropCodec::CheckParams(const KvLayout& layout, const CodecParams& params) const {
  return CheckedBlockTokens(id_, layout, params).status();
}

absl::StatusOr<std::vector<uint32_t>> TokenDropCodec::KeptBlocks(const KvLayout& layout,
                                                                 uint32_t num_tokens,
                                                                 const CodecParams& params) const {
  STRATA_ASSIGN_OR_RETURN(BlockChoice choice, ChooseBlocks(layout, num_tokens, params));
  return std::move(choice.blocks);
}

absl::StatusOr<TokenDropCodec::BlockChoice> TokenDropCodec::ChooseBlocks(
    const KvLayout& layout, uint32_t num_tokens, const CodecParams& params) const {
  STRATA_ASSIGN_OR_RETURN(const uint32_t block_tokens, CheckedBlockTokens(id_, layout, params));
  if (num_tokens == 0 || num_tokens > layout.chunk_tokens) {
    return absl::InvalidArgumentError(fmt::format("codec {}: {} tokens of a {}-token chunk", name(),
                                                  num_tokens, layout.chunk_tokens));
  }
  if (id_ == CodecId::kDropH2o) {
    if (params.importance.size() != num_tokens) {
      return absl::InvalidArgumentError(
          fmt::format("codec {}: {} importance values for a chunk of {} tokens", name(),
                      params.importance.size(), num_tokens));
    }
    for (float value : params.importance) {
      if (!std::isfinite(value) || value < 0) {
        return absl::InvalidArgumentError(fmt::format(
            "codec {}: importance must be finite and non-negative, got {}", name(), value));
      }
    }
  }
  const Blocks blocks{.block_tokens = block_tokens, .num_tokens = num_tokens};
  const uint32_t n = blocks.count();
  const uint32_t recent_tokens =
      params.recent_tokens != 0 ? params.recent_tokens : CeilDiv(num_tokens, kDefaultRecentShare);
  const uint32_t sink =
      CeilDiv(params.sink_tokens != 0 ? params.sink_tokens : block_tokens, block_tokens);
  const uint32_t recent = CeilDiv(recent_tokens, block_tokens);
  std::vector<bool> keep(n, false);
  for (uint32_t b = 0; b < std::min(sink, n); ++b) keep[b] = true;
  for (uint32_t b = n - std::min(recent, n); b < n; ++b) keep[b] = true;
  if (id_ == CodecId::kDropH2o) {
    const uint32_t heavy =
        CeilDiv(params.heavy_tokens != 0 ? params.heavy_tokens : recent_tokens, block_tokens);
    KeepHeavyBlocks(blocks, params.importance, heavy, keep);
  }
  BlockChoice choice{.block_tokens = block_tokens};
  for (uint32_t b = 0; b < n; ++b) {
    if (keep[b]) choice.blocks.push_back(b);
  }
  return choice;
}

absl::StatusOr<std::vector<std::byte>> TokenDropCodec::Encode(const KvLayout& layout,
                                                              uint32_t num_tokens,
                                                              std::span<const std::byte> payload,
                                                              const CodecParams& params) const {
  STRATA_ASSIGN_OR_RETURN(const BlockChoice choice, ChooseBlocks(layout, num_tokens, params));
  STRATA_RETURN_IF_ERROR(internal::CheckPayload(name(), layout, num_tokens, payload));
  const std::vector<uint32_t>& kept = choice.blocks;
  const Blocks blocks{.block_tokens = choice.block_tokens, .num_tokens = num_tokens};
  const uint64_t token_bytes = layout.plane_token_bytes();
  const uint64_t plane_stride = Pad4(blocks.TokensIn(kept) * token_bytes);
  const uint64_t index_bytes = 4 + 4ull * kept.size();
  const EncodedChunkHeader header{.codec = id_,
                                  .layout_fingerprint = layout.Fingerprint(),
                                  .num_tokens = num_tokens,
                                  .num_layers = layout.num_layers,
                                  .group_size = blocks.block_tokens,
                                  .decoded_bytes = payload.size()};
  const std::vector<uint64_t> section_bytes(layout.num_layers,
                                            index_bytes + plane_stride * layout.planes_per_layer());
  EncodedChunkWriter writer(header, section_bytes);
  const uint32_t k = static_cast<uint32_t>(kept.size());
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    std::byte* section = writer.section(layer).data();
    std::memcpy(section, &k, 4);
    std::memcpy(section + 4, kept.data(), 4ull * k);
    for (uint32_t p = 0; p < layout.planes_per_layer(); ++p) {
      const std::byte* plane = payload.data() + layout.plane_offset(layer, p, num_tokens);
      std::byte* rows = section + index_bytes + p * plane_stride;
      for (uint32_t b : kept) {
        const uint64_t bytes = blocks.length(b) * token_bytes;
        std::memcpy(rows, plane + blocks.first_token(b) * token_bytes, bytes);
        rows += bytes;
      }
    }
  }
  return std::move(writer).Finish();
}

absl::Status TokenDropCodec::Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                                    std::span<std::byte> out) const {
  STRATA_ASSIGN_OR_RETURN(const EncodedChunk chunk, internal::OpenFrame(id_, layout, encoded));
  const uint32_t tokens = chunk.header().num_tokens;
  STRATA_RETURN_IF_ERROR(internal::CheckOutput(out, layout.chunk_bytes(tokens), layout.dtype));
  const uint64_t layer_bytes = layout.layer_bytes(tokens);
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    STRATA_RETURN_IF_ERROR(
        DecodeWholeLayer(id_, chunk, layout, layer, out.subspan(layer * layer_bytes, layer_bytes)));
  }
  return absl::OkStatus();
}

absl::Status TokenDropCodec::DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                                         uint32_t layer, std::span<std::byte> out) const {
  STRATA_RETURN_IF_ERROR(internal::CheckLayer(layout, layer));
  STRATA_ASSIGN_OR_RETURN(const EncodedChunk chunk, internal::OpenFrame(id_, layout, encoded));
  STRATA_RETURN_IF_ERROR(
      internal::CheckOutput(out, layout.layer_bytes(chunk.header().num_tokens), layout.dtype));
  return DecodeWholeLayer(id_, chunk, layout, layer, out);
}

absl::StatusOr<KeptTokens> TokenDropCodec::DecodeKept(const KvLayout& layout,
                                                      std::span<const std::byte> encoded) const {
  STRATA_ASSIGN_OR_RETURN(const EncodedChunk chunk, internal::OpenFrame(id_, layout, encoded));
  STRATA_ASSIGN_OR_RETURN(const Blocks blocks, FrameBlocks(chunk, layout));
  KeptTokens kept{.block_tokens = blocks.block_tokens};
  const uint64_t token_bytes = layout.plane_token_bytes();
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    STRATA_ASSIGN_OR_RETURN(Section section, ReadSection(chunk, layout, blocks, layer));
    if (layer == 0) {
      kept.blocks = std::move(section.blocks);
      kept.num_tokens = section.kept_tokens;
      kept.payload.resize(layout.chunk_bytes(kept.num_tokens));
    } else if (section.blocks != kept.blocks) {
      return absl::DataLossError(
          fmt::format("token-drop frame: layer {} kept other blocks than layer 0", layer));
    }
    for (uint32_t p = 0; p < layout.planes_per_layer(); ++p) {
      std::memcpy(kept.payload.data() + layout.plane_offset(layer, p, kept.num_tokens),
                  section.rows.data() + p * section.plane_stride, kept.num_tokens * token_bytes);
    }
  }
  return kept;
}

}  // namespace strata::storage
