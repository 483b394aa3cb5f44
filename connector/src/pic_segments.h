// MEPIC's chunk processor (ALGORITHMS.md section 3c, the scheduling path; metadata only): splits a
// request's prompt by its segment markers into chunk segments (reusable passages whose KV does not
// depend on where they appear) and prompt segments (request-specific text), pads them as MEPIC
// does, and keys each chunk with KeyHasher::PicKey.
//
// Padding: a chunk of L tokens gets leading pad tokens up to a whole number of blocks, so it ends
// on a block boundary (its canonical form, CanonicalPicTokens: its key does not depend on its
// offset); a prompt segment followed by a chunk gets trailing pad tokens, so the chunk starts on a
// block boundary; the final prompt segment is not padded. Every chunk therefore starts and ends on
// a block boundary of the padded prompt, and its blocks 2..n can be shared pages.
//
// Markers name the chunks; whatever lies between them is prompt. Callers that cannot pass markers
// may split on a separator token sequence instead (LMCache's blend mode): MarkersFromSeparator.
//
// Pure functions over plain values; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/key_hasher.h"

namespace strata::connector::internal {

// Tokens [begin, end) of the prompt are a reusable chunk.
struct SegmentMarker {
  uint32_t begin = 0;
  uint32_t end = 0;
  friend bool operator==(const SegmentMarker&, const SegmentMarker&) = default;
};

enum class SegmentKind : uint8_t { kChunk, kPrompt };

struct PicSegment {
  SegmentKind kind = SegmentKind::kPrompt;
  // Its tokens in the prompt as given.
  uint32_t source_begin = 0;
  uint32_t source_end = 0;
  // Where its first token (a pad, when it has leading pads) lies in the padded prompt.
  uint32_t padded_begin = 0;
  // Pad tokens: leading for a chunk, trailing for a prompt segment.
  uint32_t pad_tokens = 0;
  // A chunk's PicKey (empty for a prompt segment).
  ChunkKey key;

  uint32_t source_tokens() const { return source_end - source_begin; }
  uint32_t padded_tokens() const { return source_tokens() + pad_tokens; }
};

struct PicOptions {
  // The engine's KV block: chunks are padded to whole blocks of it. > 0.
  uint32_t block_tokens = 16;
  uint32_t pad_token = 0;
  // How the chunks' KV is produced (KeyHasher::PicKey): part of every chunk's key.
  uint32_t compile_variant = 0;
};

struct PicPrompt {
  std::vector<PicSegment> segments;  // in prompt order, covering it
  // The padded prompt the engine computes over.
  std::vector<uint32_t> padded_tokens;
};

// The segments of `prompt` with `chunks` (sorted, disjoint, non-empty, inside the prompt) as its
// chunk segments, keyed in the namespace of the request's `tenant_salt` (empty: shared by every
// tenant). kInvalidArgument naming the first bad marker (empty, out of range, overlapping or out
// of order) or a zero block size: the caller then treats the request as a plain prompt (prefix
// caching).
absl::StatusOr<PicPrompt> SplitPicPrompt(std::span<const uint32_t> prompt,
                                         std::span<const SegmentMarker> chunks,
                                         const KeyHasher& hasher, const PicOptions& options,
                                         std::string_view tenant_salt = {});

// Chunk markers from a separator token sequence (LMCache's blend mode): every non-empty run of
// tokens before a separator is a chunk; the separators and what follows the last one (the
// question) are prompt. No separator: no chunk. kInvalidArgument for an empty separator.
absl::StatusOr<std::vector<SegmentMarker>> MarkersFromSeparator(
    std::span<const uint32_t> prompt, std::span<const uint32_t> separator);

}  // namespace strata::connector::internal
