#include "connector/src/pic_segments.h"

#include <algorithm>

#include "fmt/format.h"

namespace strata::connector::internal {
namespace {

absl::Status CheckMarkers(std::span<const SegmentMarker> chunks, size_t prompt_tokens) {
  uint32_t previous_end = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SegmentMarker& marker = chunks[i];
    if (marker.begin >= marker.end) {
      return absl::InvalidArgumentError(
          fmt::format("segment marker {} [{}, {}) is empty", i, marker.begin, marker.end));
    }
    if (marker.end > prompt_tokens) {
      return absl::InvalidArgumentError(
          fmt::format("segment marker {} [{}, {}) lies beyond the prompt's {} tokens", i,
                      marker.begin, marker.end, prompt_tokens));
    }
    if (marker.begin < previous_end) {
      return absl::InvalidArgumentError(fmt::format(
          "segment marker {} [{}, {}) overlaps or precedes the one before it (which ends at {})", i,
          marker.begin, marker.end, previous_end));
    }
    previous_end = marker.end;
  }
  return absl::OkStatus();
}

uint32_t PadToBlock(uint32_t tokens, uint32_t block_tokens) {
  return (block_tokens - tokens % block_tokens) % block_tokens;
}

}  // namespace

absl::StatusOr<PicPrompt> SplitPicPrompt(std::span<const uint32_t> prompt,
                                         std::span<const SegmentMarker> chunks,
                                         const KeyHasher& hasher, const PicOptions& options,
                                         std::string_view tenant_salt) {
  if (options.block_tokens == 0) return absl::InvalidArgumentError("PIC block size of 0 tokens");
  if (absl::Status valid = CheckMarkers(chunks, prompt.size()); !valid.ok()) return valid;
  PicPrompt result;
  auto add_prompt = [&](uint32_t begin, uint32_t end, bool chunk_follows) {
    if (begin == end) return;
    PicSegment segment{.kind = SegmentKind::kPrompt,
                       .source_begin = begin,
                       .source_end = end,
                       .padded_begin = static_cast<uint32_t>(result.padded_tokens.size())};
    segment.pad_tokens = chunk_follows ? PadToBlock(end - begin, options.block_tokens) : 0;
    result.padded_tokens.insert(result.padded_tokens.end(), prompt.begin() + begin,
                                prompt.begin() + end);
    result.padded_tokens.insert(result.padded_tokens.end(), segment.pad_tokens, options.pad_token);
    result.segments.push_back(std::move(segment));
  };
  uint32_t cursor = 0;
  for (const SegmentMarker& marker : chunks) {
    add_prompt(cursor, marker.begin, /*chunk_follows=*/true);
    const std::vector<uint32_t> canonical =
        CanonicalPicTokens(prompt.subspan(marker.begin, marker.end - marker.begin),
                           options.block_tokens, options.pad_token);
    PicSegment segment{
        .kind = SegmentKind::kChunk,
        .source_begin = marker.begin,
        .source_end = marker.end,
        .padded_begin = static_cast<uint32_t>(result.padded_tokens.size()),
        .pad_tokens = static_cast<uint32_t>(canonical.size()) - (marker.end - marker.begin),
        .key = hasher.PicKey(canonical, options.compile_variant, tenant_salt)};
    result.padded_tokens.insert(result.padded_tokens.end(), canonical.begin(), canonical.end());
    result.segments.push_back(std::move(segment));
    cursor = marker.end;
  }
  add_prompt(cursor, static_cast<uint32_t>(prompt.size()), /*chunk_follows=*/false);
  return result;
}

absl::StatusOr<std::vector<SegmentMarker>> MarkersFromSeparator(
    std::span<const uint32_t> prompt, std::span<const uint32_t> separator) {
  if (separator.empty()) return absl::InvalidArgumentError("empty PIC separator");
  std::vector<SegmentMarker> markers;
  uint32_t piece_begin = 0;
  auto at = prompt.begin();
  while (true) {
    at = std::search(at, prompt.end(), separator.begin(), separator.end());
    if (at == prompt.end()) break;
    const auto separator_begin = static_cast<uint32_t>(at - prompt.begin());
    if (separator_begin > piece_begin) markers.push_back({piece_begin, separator_begin});
    at += static_cast<std::ptrdiff_t>(separator.size());
    piece_begin = static_cast<uint32_t>(at - prompt.begin());
  }
  return markers;
}

}  // namespace strata::connector::internal
