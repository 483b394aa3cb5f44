// The input and output checks every codec makes (codec.h states them), written once. Internal to
// storage/codec; pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "storage/codec/codec.h"
#include "storage/codec/encoded_chunk.h"

namespace strata::storage::internal {

bool Aligned(const void* p, uint64_t alignment);

// Encode's payload check: exactly layout.chunk_bytes(num_tokens) bytes, aligned to the dtype's
// size; kInvalidArgument naming `codec` otherwise. The layout and num_tokens are checked first.
absl::Status CheckPayload(std::string_view codec, const KvLayout& layout, uint32_t num_tokens,
                          std::span<const std::byte> payload);

// Decode's first steps: a valid layout, 4-byte aligned bytes (kInvalidArgument otherwise), a frame
// that parses (EncodedChunk::Parse's errors) and was written by `codec` for `layout`
// (EncodedChunk::CheckWrittenBy's errors). The result points into `encoded`.
absl::StatusOr<EncodedChunk> OpenFrame(CodecId codec, const KvLayout& layout,
                                       std::span<const std::byte> encoded);

// A decode output of exactly `expected_bytes`, aligned to `dtype`; kInvalidArgument otherwise.
absl::Status CheckOutput(std::span<const std::byte> out, uint64_t expected_bytes, KvDtype dtype);

// kInvalidArgument naming `codec` when params.energy is set (only xkv takes it).
absl::Status CheckNoEnergy(std::string_view codec, const CodecParams& params);

// kInvalidArgument naming `codec` when a token-dropping parameter is set (sink_tokens,
// recent_tokens, heavy_tokens, importance: only the token-dropping codecs take them).
absl::Status CheckKeepsTokens(std::string_view codec, const CodecParams& params);

// kInvalidArgument when `layer` is outside the layout.
absl::Status CheckLayer(const KvLayout& layout, uint32_t layer);

}  // namespace strata::storage::internal
