#include "storage/tiered/chunk_codec.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/fmt_absl.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/token_drop_codec.h"

namespace strata::storage {

KvLayout CodingLayout(const KvLayout& layout, uint32_t num_tokens) {
  KvLayout coded = layout;
  coded.chunk_tokens = std::max(layout.chunk_tokens, num_tokens);
  return coded;
}

absl::StatusOr<std::optional<EncodedForm>> EncodeChunk(
    const Codec& codec, const CodecParams& params, const KvLayout& chunk_layout,
    uint32_t num_tokens, std::span<const std::byte> chunk, std::span<std::byte> decoded) {
  const KvLayout layout = CodingLayout(chunk_layout, num_tokens);
  absl::StatusOr<std::vector<std::byte>> frame = codec.Encode(layout, num_tokens, chunk, params);
  if (!frame.ok()) return frame.status();
  if (frame->size() >= chunk.size()) return std::nullopt;
  // Its checksum is what readers are told and decodes are checked by.
  std::span<const std::byte> delivered = decoded;
  std::vector<std::byte> kept;
  absl::Status s;
  if (const auto* dropping = dynamic_cast<const TokenDropCodec*>(&codec); dropping != nullptr) {
    absl::StatusOr<KeptTokens> tokens = dropping->DecodeKept(layout, *frame);
    s = tokens.status();
    if (s.ok()) kept = std::move(tokens->payload);
    delivered = kept;
  } else {
    s = codec.Decode(layout, *frame, decoded);
  }
  if (!s.ok()) {
    return absl::InternalError(
        fmt::format("codec {} does not decode its own frame: {}", codec.name(), s));
  }
  std::optional<EncodedForm> encoded(
      EncodedForm{.frame = *std::move(frame),
                  .encoding = {.codec = static_cast<uint16_t>(codec.id()),
                               .decoded_bytes = delivered.size(),
                               .decoded_checksum = ChecksumBytes(delivered)}});
  encoded->part = encoded->frame;
  return encoded;
}

void KeepError(const KvError& error, StoredEncoding& encoding) {
  encoding.relative_error = static_cast<float>(error.relative_frobenius);
  encoding.max_abs_error = static_cast<float>(error.max_abs);
}

std::optional<KvError> KeptError(const StoredEncoding& encoding) {
  // -1: not measured; a NaN was measured (on KV that holds a NaN) and is reported as such.
  if (!encoding.encoded() || encoding.relative_error < 0) return std::nullopt;
  return KvError{.relative_frobenius = encoding.relative_error, .max_abs = encoding.max_abs_error};
}

absl::Status DecodeChunk(const Codec& codec, const KvLayout& chunk_layout, uint32_t num_tokens,
                         const StoredEncoding& encoding, std::span<const std::byte> frame,
                         std::span<const std::span<std::byte>> destination) {
  const KvLayout layout = CodingLayout(chunk_layout, num_tokens);
  const uint64_t layer_bytes = layout.layer_bytes(num_tokens);
  uint64_t destination_bytes = 0;
  for (std::span<std::byte> part : destination) destination_bytes += part.size();
  if (layer_bytes * layout.num_layers != encoding.decoded_bytes ||
      destination_bytes != encoding.decoded_bytes) {
    return absl::DataLossError("the encoded chunk's sizes disagree with its layout");
  }
  ChecksumStream checksum;
  std::vector<std::byte> straddling;
  size_t part = 0;
  uint64_t part_start = 0;  // offset of destination[part] in the chunk
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    const uint64_t offset = layout.plane_offset(layer, 0, num_tokens);
    while (offset >= part_start + destination[part].size()) {
      part_start += destination[part++].size();
    }
    const bool whole = offset + layer_bytes <= part_start + destination[part].size();
    if (!whole) straddling.resize(layer_bytes);
    const std::span<std::byte> out =
        whole ? destination[part].subspan(offset - part_start, layer_bytes)
              : std::span<std::byte>(straddling);
    if (absl::Status s = codec.DecodeLayer(layout, frame, layer, out); !s.ok()) {
      return absl::DataLossError(fmt::format("the encoded chunk does not decode: {}", s));
    }
    checksum.Update(out);
    if (whole) continue;
    uint64_t copied = 0;  // into the pieces the layer spans
    for (size_t p = part, start = part_start; copied < layer_bytes;
         start += destination[p++].size()) {
      const uint64_t from = offset + copied - start;
      const uint64_t n = std::min<uint64_t>(destination[p].size() - from, layer_bytes - copied);
      std::memcpy(destination[p].data() + from, straddling.data() + copied, n);
      copied += n;
    }
  }
  if (checksum.Digest() != encoding.decoded_checksum) {
    return absl::DataLossError("the decoded bytes differ from those encoded");
  }
  return absl::OkStatus();
}

std::span<const std::byte> Contiguous(const PayloadView& payload, std::vector<std::byte>& scratch) {
  const std::span<const ArenaRange> ranges = payload.ranges();
  bool adjacent = true;
  for (size_t i = 1; i < ranges.size() && adjacent; ++i) {
    adjacent = ranges[i].offset == ranges[i - 1].offset + ranges[i - 1].size_bytes;
  }
  if (adjacent && !ranges.empty()) {
    return {payload.range_bytes(0).data(), static_cast<size_t>(payload.size_bytes())};
  }
  if (scratch.size() < payload.size_bytes()) scratch.resize(payload.size_bytes());
  const std::span<std::byte> copy(scratch.data(), static_cast<size_t>(payload.size_bytes()));
  payload.CopyTo(copy);
  return copy;
}

absl::InlinedVector<std::span<std::byte>, 4> Pieces(const MutablePayloadView& pages) {
  absl::InlinedVector<std::span<std::byte>, 4> pieces;
  for (size_t i = 0; i < pages.ranges().size(); ++i) pieces.push_back(pages.range_bytes(i));
  return pieces;
}

absl::StatusOr<std::span<const std::byte>> DecodePayload(
    const KvLayout& layout, uint32_t num_tokens, const StoredEncoding& encoding,
    const PayloadView& payload, std::vector<std::byte>& gathered, std::vector<std::byte>& out) {
  absl::StatusOr<const Codec*> codec = CodecRegistry::Find(static_cast<CodecId>(encoding.codec));
  if (!codec.ok()) return codec.status();
  const std::span<const std::byte> frame = Contiguous(payload, gathered);
  if (out.size() < encoding.decoded_bytes) out.resize(encoding.decoded_bytes);
  const std::span<std::byte> whole[] = {
      std::span(out).first(static_cast<size_t>(encoding.decoded_bytes))};
  if (absl::Status s = DecodeChunk(**codec, layout, num_tokens, encoding, frame, whole); !s.ok()) {
    return s;
  }
  return whole[0];
}

}  // namespace strata::storage
