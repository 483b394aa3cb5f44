// Encoding and decoding one chunk's payload with a codec (storage/codec), as the tiers that keep
// encoded chunks do: the disk tier ([disk] codec, Recode: disk_lower_tier.cc) and the host tier
// (Compress in place, decodes for loads: host_forms.h, and the demoter's and CopyDown's decodes
// before a write below). Each encoded form carries a StoredEncoding: its codec, the size and
// xxh3-64 of what it decodes to and, when measured, its error. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "core/stored_encoding.h"
#include "storage/codec/codec.h"
#include "storage/codec/kv_error.h"
#include "storage/host/payload_view.h"

namespace strata::storage {

// The layout a tier codes a chunk of `num_tokens` tokens of `layout` in: `layout` itself, or for
// a chunk longer than layout.chunk_tokens (a position-independent chunk is as long as its
// passage) the layout with chunk_tokens = num_tokens. EncodeChunk and DecodeChunk apply it, and
// whatever else reads a tier's frame must (its fingerprint is in the frame).
KvLayout CodingLayout(const KvLayout& layout, uint32_t num_tokens);

// A chunk's encoded form, owned by whoever keeps it until it is written.
struct EncodedForm {
  std::vector<std::byte> frame;
  std::span<const std::byte> part;  // the frame, as a one-part payload
  StoredEncoding encoding;          // its error not measured (-1)
};

// `chunk` (of `num_tokens` tokens of `layout`) encoded by `codec`, and in `decoded` (the chunk's
// size) what a decode of it delivers; nullopt when the frame would not shrink it. A codec that
// drops tokens leaves `decoded` alone: its encoding's decoded_bytes and decoded_checksum are its
// kept tokens' (TokenDropCodec::DecodeKept's payload), which is all a frame of it delivers. The
// codec's errors (kInvalidArgument for a layout or parameters it refuses); kInternal for a codec
// that does not decode its own frame.
absl::StatusOr<std::optional<EncodedForm>> EncodeChunk(const Codec& codec,
                                                       const CodecParams& params,
                                                       const KvLayout& layout, uint32_t num_tokens,
                                                       std::span<const std::byte> chunk,
                                                       std::span<std::byte> decoded);

// Records `error` (a decode against the chunk encoded) in `encoding`.
void KeepError(const KvError& error, StoredEncoding& encoding);

// The error `encoding` records; nullopt when it was not measured (-1).
std::optional<KvError> KeptError(const StoredEncoding& encoding);

// Decodes `frame` (`encoding`'s, of a chunk of `num_tokens` tokens of `layout`) into
// `destination` (the chunk's size in pieces) layer by layer, each layer straight into the piece
// that holds it, or through a buffer when it straddles two; checks the decoded bytes against
// encoding.decoded_checksum as they come. kDataLoss for sizes that disagree with the layout, a
// frame that does not decode, or bytes that differ from those encoded.
absl::Status DecodeChunk(const Codec& codec, const KvLayout& layout, uint32_t num_tokens,
                         const StoredEncoding& encoding, std::span<const std::byte> frame,
                         std::span<const std::span<std::byte>> destination);

// `payload` as one span: the arena's own bytes when its ranges lie end to end, else a copy in
// `scratch` (grown to fit; the caller may keep it for the next).
std::span<const std::byte> Contiguous(const PayloadView& payload, std::vector<std::byte>& scratch);

// The pieces of `pages`, in order: DecodeChunk's destination.
absl::InlinedVector<std::span<std::byte>, 4> Pieces(const MutablePayloadView& pages);

// The chunk `payload` (an encoded form, `encoding`, of `num_tokens` tokens of `layout`, in the
// host arena's pieces) decodes to, checked as DecodeChunk checks it: the first
// encoding.decoded_bytes of `out` (grown to fit), the frame read in place or gathered into
// `gathered` (Contiguous); the caller may keep both for the next. kDataLoss as DecodeChunk;
// kInvalidArgument for a codec id no codec has.
absl::StatusOr<std::span<const std::byte>> DecodePayload(
    const KvLayout& layout, uint32_t num_tokens, const StoredEncoding& encoding,
    const PayloadView& payload, std::vector<std::byte>& gathered, std::vector<std::byte>& out);

}  // namespace strata::storage
