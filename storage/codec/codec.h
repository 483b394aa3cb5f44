// Codec: one way of compressing a chunk's KV (ALGORITHMS.md section 5), behind the Compress /
// Decompress control API, the compressed tiers and the compressed loads.
//
// A codec encodes a chunk's layer-major payload (core/kv_layout.h: [layer][plane][token][kv_head]
// [head_dim] in the layout's dtype) into one self-describing byte buffer: an encoded-chunk frame
// (encoded_chunk.h: magic, format version, codec id, parameters, layout fingerprint, sizes,
// checksums) followed by one section per layer, so that one layer decodes on its own while the
// previous one is consumed. Decoding checks the frame before it reads anything: bytes that are not
// a frame, or a frame of another codec or layout, are kInvalidArgument; a truncated frame or one
// whose checksums fail is kDataLoss. A decoder never reads or writes outside the spans it is given,
// whatever the bytes hold.
//
// Each codec states the error it promises in its header (quant_codec.h, cachegen_codec.h). Lossy
// codecs bound the error per element; the bound holds for finite inputs (a group holding an
// infinity or a NaN decodes to unspecified finite or non-finite values, never out of bounds).
//
// Thread-safety: codecs are immutable; every method may be called from any thread concurrently.
// Ownership: CodecRegistry (codec_registry.h) owns every codec for the life of the process.
// Encode returns a buffer the caller owns; Decode writes only into the caller's span.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"

namespace strata::storage {

// Stored in every encoded frame: values never change meaning once released.
enum class CodecId : uint16_t {
  kInt8 = 1,
  kKivi4 = 2,
  kKivi2 = 3,
  kCacheGen = 4,
  kXkv = 5,
  kKivi8 = 6,
  kDropSinkRecent = 7,
  kDropH2o = 8,
};

// The codec's registry name ("int8", "kivi4", "kivi2", "cachegen", "xkv", "kivi8",
// "drop_sink_recent", "drop_h2o"), or "unknown" for a value that names none.
std::string_view CodecIdName(CodecId id);

// The parameters a caller may choose per Compress call. Each codec says which it reads; a codec
// given a parameter it does not take, or a value it cannot use, answers kInvalidArgument.
struct CodecParams {
  // kivi8 / kivi4 / kivi2: tokens per key group and channels per value group; 0 picks the
  // default (the largest power of two dividing a plane's channels, up to 128 for kivi8, 64 for
  // kivi4, 32 for kivi2).
  // cachegen: channels per group of one token; 0 picks every channel of the plane.
  // xkv: consecutive layers factored together; 0 picks the default (4).
  // drop_sink_recent / drop_h2o: tokens per kept block; 0 picks 16 (token_drop_codec.h).
  // int8 takes none (0): it scales per token and head.
  uint32_t group_size = 0;
  // cachegen: bits per code, 2, 4 or 8; 0 picks the default (cachegen_codec.h). The other codecs
  // fix their bits and take none (0).
  uint32_t bits = 0;
  // xkv: the share of each group's energy (squared singular values) its rank keeps, in (0, 1]; 0
  // picks the default (0.99). The other codecs take none (0).
  float energy = 0;
  // drop_sink_recent / drop_h2o (token_drop_codec.h): the tokens kept at the chunk's start, at
  // its end, and (drop_h2o) of highest importance, each rounded up to whole blocks; 0 picks the
  // codec's default. The other codecs take none (0).
  uint32_t sink_tokens = 0;
  uint32_t recent_tokens = 0;
  uint32_t heavy_tokens = 0;
  // drop_h2o: one importance per token of the chunk being encoded, supplied by the engine for
  // that chunk (a view, valid for the call). Empty for every other codec.
  std::span<const float> importance;
};

class Codec {
 public:
  virtual ~Codec() = default;

  virtual CodecId id() const = 0;
  // The registry name: CodecIdName(id()).
  std::string_view name() const { return CodecIdName(id()); }
  // The promise this codec makes about a decoded element, in one line for operators (ListChunks,
  // the CLI); the exact statement is in the codec's header.
  virtual std::string_view error_bound() const = 0;
  // Whether the codec drops tokens (token_drop_codec.h): its Decode restores a chunk only when
  // nothing was dropped, so no tier keeps chunks in its form and no load decodes them.
  virtual bool drops_tokens() const { return false; }

  // Encodes the first `num_tokens` tokens' chunk of `layout`: `payload` holds exactly
  // layout.chunk_bytes(num_tokens) bytes, aligned to the dtype's size. Returns the encoded frame.
  // kInvalidArgument for an invalid layout, a dtype the codec cannot read, num_tokens outside
  // [1, chunk_tokens], a payload of another size or alignment, or bad params.
  virtual absl::StatusOr<std::vector<std::byte>> Encode(const KvLayout& layout, uint32_t num_tokens,
                                                        std::span<const std::byte> payload,
                                                        const CodecParams& params) const = 0;

  // OK when Encode would take `params` for chunks of `layout`, whatever their token count;
  // otherwise the kInvalidArgument Encode would answer (for the layout, its dtype or the
  // parameters). Reads no payload: a cheap check before chunks arrive (an engine's handshake).
  virtual absl::Status CheckParams(const KvLayout& layout, const CodecParams& params) const = 0;

  // Decodes a whole frame into `out`, which must hold exactly layout.chunk_bytes(num_tokens) bytes
  // (num_tokens from the frame: EncodedChunk::Parse), aligned to the dtype's size; `encoded`
  // must be 4-byte aligned. kInvalidArgument for bytes that are not a frame of this codec and
  // layout, or a bad output span; kDataLoss for a truncated or corrupted frame. On failure `out`
  // holds unspecified bytes (layers before the failing one may be decoded).
  virtual absl::Status Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                              std::span<std::byte> out) const = 0;

  // Decodes layer `layer` of a frame into `out` (exactly layout.layer_bytes(num_tokens) bytes):
  // the bytes Decode writes at layout.plane_offset(layer, 0, num_tokens). Same errors as Decode,
  // plus kInvalidArgument for a layer outside the layout. Checks the frame and this layer's
  // checksum only.
  virtual absl::Status DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                                   uint32_t layer, std::span<std::byte> out) const = 0;
};

}  // namespace strata::storage
