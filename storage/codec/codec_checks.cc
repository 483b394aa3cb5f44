#include "storage/codec/codec_checks.h"

#include <utility>

#include "core/status_macros.h"
#include "fmt/format.h"

namespace strata::storage::internal {

bool Aligned(const void* p, uint64_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

absl::Status CheckPayload(std::string_view codec, const KvLayout& layout, uint32_t num_tokens,
                          std::span<const std::byte> payload) {
  if (payload.size() != layout.chunk_bytes(num_tokens)) {
    return absl::InvalidArgumentError(
        fmt::format("codec {}: payload holds {} bytes, a chunk of {} tokens is {}", codec,
                    payload.size(), num_tokens, layout.chunk_bytes(num_tokens)));
  }
  if (!Aligned(payload.data(), DtypeSizeBytes(layout.dtype))) {
    return absl::InvalidArgumentError(
        fmt::format("codec {}: payload is not aligned to its dtype", codec));
  }
  return absl::OkStatus();
}

absl::StatusOr<EncodedChunk> OpenFrame(CodecId codec, const KvLayout& layout,
                                       std::span<const std::byte> encoded) {
  STRATA_RETURN_IF_ERROR(layout.Validate());
  if (!Aligned(encoded.data(), 4)) {
    return absl::InvalidArgumentError("encoded chunk bytes must be 4-byte aligned");
  }
  STRATA_ASSIGN_OR_RETURN(EncodedChunk chunk, EncodedChunk::Parse(encoded));
  STRATA_RETURN_IF_ERROR(chunk.CheckWrittenBy(codec, layout));
  return chunk;
}

absl::Status CheckOutput(std::span<const std::byte> out, uint64_t expected_bytes, KvDtype dtype) {
  if (out.size() != expected_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("decode output holds {} bytes, the encoded chunk decodes to {}", out.size(),
                    expected_bytes));
  }
  if (!Aligned(out.data(), DtypeSizeBytes(dtype))) {
    return absl::InvalidArgumentError(
        fmt::format("decode output is not aligned to its dtype {}", DtypeName(dtype)));
  }
  return absl::OkStatus();
}

absl::Status CheckNoEnergy(std::string_view codec, const CodecParams& params) {
  if (params.energy == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      fmt::format("codec {} takes no energy (only xkv does), got {}", codec, params.energy));
}

absl::Status CheckKeepsTokens(std::string_view codec, const CodecParams& params) {
  if (params.sink_tokens == 0 && params.recent_tokens == 0 && params.heavy_tokens == 0 &&
      params.importance.empty()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(fmt::format(
      "codec {} keeps every token: it takes no sink_tokens, recent_tokens, heavy_tokens or "
      "importance (only drop_sink_recent and drop_h2o do)",
      codec));
}

absl::Status CheckLayer(const KvLayout& layout, uint32_t layer) {
  if (layer >= layout.num_layers) {
    return absl::InvalidArgumentError(
        fmt::format("layer {} of a {}-layer chunk", layer, layout.num_layers));
  }
  return absl::OkStatus();
}

}  // namespace strata::storage::internal
