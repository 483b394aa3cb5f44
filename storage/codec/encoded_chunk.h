// The frame every codec wraps its encoded bytes in, so that a decoder recognises its own bytes,
// refuses anything else, and never reads past what it was given. Little-endian:
//
//   offset  bytes   field
//   0       4       magic "SKVC"
//   4       8       header checksum: xxh3-64 of bytes [12, 52 + 16 * num_layers)
//   12      2       format version (kEncodedFormatVersion; see below)
//   14      2       codec id (CodecId)
//   16      8       layout fingerprint (KvLayout::Fingerprint)
//   24      4       num_tokens
//   28      4       num_layers
//   32      4       group_size (the codec parameter; 0 when the codec takes none)
//   36      8       decoded bytes (layout.chunk_bytes(num_tokens))
//   44      8       encoded bytes (the whole frame)
//   52      16 * L  per layer: its section's size in bytes, then the xxh3-64 of that section
//   ...             the L sections, in layer order
//
// Format versions: 1, and 2 where kivi4's and kivi2's scales and zeros are fp16 values rather than
// fp32 (quant_codec.h); the frame itself is the same. Parse reads both; writers write 2.
//
// Sections start at 4-byte multiples when their sizes are 4-byte multiples. Pure functions and
// value types; thread-compatible. A parsed EncodedChunk points into the caller's bytes and is
// valid while they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "storage/codec/codec.h"

namespace strata::storage {

inline constexpr uint32_t kEncodedMagic = 0x43564b53;       // "SKVC" read as a little-endian u32
inline constexpr uint16_t kEncodedFormatVersion = 2;        // what writers write
inline constexpr uint16_t kOldestEncodedFormatVersion = 1;  // the oldest Parse reads
inline constexpr uint64_t kEncodedHeaderBytes = 52;
inline constexpr uint64_t kEncodedLayerEntryBytes = 16;

struct EncodedChunkHeader {
  // In [kOldestEncodedFormatVersion, kEncodedFormatVersion]: what a codec's sections mean may
  // depend on it. Set by Parse; a writer writes the one its header names.
  uint16_t format_version = kEncodedFormatVersion;
  CodecId codec = CodecId::kInt8;
  uint64_t layout_fingerprint = 0;
  uint32_t num_tokens = 0;
  uint32_t num_layers = 0;
  uint32_t group_size = 0;
  uint64_t decoded_bytes = 0;
  uint64_t encoded_bytes = 0;  // set by EncodedChunkWriter
};

// Bytes before the first section: the header and the layer table.
constexpr uint64_t EncodedFrameOverheadBytes(uint32_t num_layers) {
  return kEncodedHeaderBytes + kEncodedLayerEntryBytes * num_layers;
}

// Builds one frame: the constructor allocates it for sections of the given sizes (one per layer
// of header.num_layers), the caller fills each section, Finish writes the header and checksums.
class EncodedChunkWriter {
 public:
  EncodedChunkWriter(const EncodedChunkHeader& header, std::span<const uint64_t> section_bytes);

  // Layer `layer`'s section, zero-filled until written. Its start is 4-byte aligned when every
  // section size is a multiple of 4.
  std::span<std::byte> section(uint32_t layer);

  // Writes the layer table (sizes and section checksums) and the header; returns the frame.
  std::vector<std::byte> Finish() &&;

  // The frame of sections already encoded, one per layer of header.num_layers, in layer order.
  static std::vector<std::byte> Assemble(const EncodedChunkHeader& header,
                                         std::span<const std::vector<std::byte>> sections);

 private:
  EncodedChunkHeader header_;
  std::vector<uint64_t> offsets_;  // num_layers + 1 section boundaries
  std::vector<std::byte> frame_;
};

// A frame whose structure has been checked: its header checksum holds, its sizes add up to the
// bytes given, and each section lies inside them. Section checksums are checked per layer.
class EncodedChunk {
 public:
  // kInvalidArgument when the bytes do not start with the magic or name a format version this
  // build does not read; kDataLoss when they are shorter than the frame says (truncated), when
  // the header checksum fails, or when the layer table does not add up; kInvalidArgument when
  // bytes follow the frame.
  static absl::StatusOr<EncodedChunk> Parse(std::span<const std::byte> encoded);
  // The same checks of a frame of `frame_bytes` bytes held where the caller cannot read it (a
  // device), from its first bytes: `head` holds at least its header and layer table
  // (EncodedFrameOverheadBytes of its layers), or all of a shorter frame; fewer are
  // kInvalidArgument. The chunk it gives holds no sections: only their places (section_offset,
  // section_bytes) and the header.
  static absl::StatusOr<EncodedChunk> ParseHead(std::span<const std::byte> head,
                                                uint64_t frame_bytes);

  const EncodedChunkHeader& header() const { return header_; }
  // Where layer `layer`'s section lies in the frame, and its size.
  uint64_t section_offset(uint32_t layer) const { return offsets_[layer]; }
  uint64_t section_bytes(uint32_t layer) const { return offsets_[layer + 1] - offsets_[layer]; }
  // The section's bytes. Parse's chunks only (checked).
  std::span<const std::byte> section(uint32_t layer) const;
  // kDataLoss when section `layer` does not hash to its checksum in the table. Parse's chunks
  // only (checked).
  absl::Status VerifySection(uint32_t layer) const;

  // The checks every codec makes before decoding: the frame was written by `codec` for `layout`
  // (kInvalidArgument otherwise, naming both sides) and its token count and decoded size agree
  // with the layout (kDataLoss otherwise).
  absl::Status CheckWrittenBy(CodecId codec, const KvLayout& layout) const;

 private:
  EncodedChunkHeader header_;
  std::span<const std::byte> frame_;  // the whole frame; empty from ParseHead
  std::vector<uint64_t> offsets_;     // num_layers + 1 section boundaries
  std::vector<uint64_t> checksums_;
};

}  // namespace strata::storage
