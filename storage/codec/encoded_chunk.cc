#include "storage/codec/encoded_chunk.h"

#include <cstring>
#include <string_view>

#include "core/byte_codec.h"
#include "core/check.h"
#include "core/status_macros.h"
#include "core/xxh3_dispatch.h"
#include "fmt/format.h"

namespace strata::storage {
namespace {

constexpr uint64_t kChecksumOffset = 4;
constexpr uint64_t kChecksummedFrom = 12;
constexpr uint64_t kVersionOffset = 12;
constexpr uint64_t kNumLayersOffset = 28;

uint64_t Hash(std::span<const std::byte> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

template <class T>
T Load(std::span<const std::byte> bytes, uint64_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

absl::Status Truncated(uint64_t have, uint64_t need, std::string_view what) {
  return absl::DataLossError(
      fmt::format("encoded chunk truncated: {} bytes, {} needs {}", have, what, need));
}

}  // namespace

EncodedChunkWriter::EncodedChunkWriter(const EncodedChunkHeader& header,
                                       std::span<const uint64_t> section_bytes)
    : header_(header) {
  STRATA_CHECK(section_bytes.size() == header.num_layers);
  STRATA_CHECK(header.format_version >= kOldestEncodedFormatVersion &&
               header.format_version <= kEncodedFormatVersion);
  offsets_.reserve(section_bytes.size() + 1);
  offsets_.push_back(EncodedFrameOverheadBytes(header.num_layers));
  for (const uint64_t bytes : section_bytes) offsets_.push_back(offsets_.back() + bytes);
  header_.encoded_bytes = offsets_.back();
  frame_.resize(header_.encoded_bytes);
}

std::span<std::byte> EncodedChunkWriter::section(uint32_t layer) {
  return std::span(frame_).subspan(offsets_[layer], offsets_[layer + 1] - offsets_[layer]);
}

std::vector<std::byte> EncodedChunkWriter::Finish() && {
  ByteWriter out;
  out.U32(kEncodedMagic);
  out.U64(0);  // header checksum, below
  out.Raw(&header_.format_version, sizeof(header_.format_version));
  const auto codec = static_cast<uint16_t>(header_.codec);
  out.Raw(&codec, sizeof(codec));
  out.U64(header_.layout_fingerprint);
  out.U32(header_.num_tokens);
  out.U32(header_.num_layers);
  out.U32(header_.group_size);
  out.U64(header_.decoded_bytes);
  out.U64(header_.encoded_bytes);
  for (uint32_t layer = 0; layer < header_.num_layers; ++layer) {
    out.U64(offsets_[layer + 1] - offsets_[layer]);
    out.U64(Hash(section(layer)));
  }
  const std::string head = std::move(out).Take();
  STRATA_CHECK(head.size() == offsets_[0]);
  std::memcpy(frame_.data(), head.data(), head.size());
  const uint64_t checksum =
      Hash(std::span(frame_).subspan(kChecksummedFrom, head.size() - kChecksummedFrom));
  std::memcpy(frame_.data() + kChecksumOffset, &checksum, sizeof(checksum));
  return std::move(frame_);
}

std::vector<std::byte> EncodedChunkWriter::Assemble(
    const EncodedChunkHeader& header, std::span<const std::vector<std::byte>> sections) {
  STRATA_CHECK(sections.size() == header.num_layers);
  std::vector<uint64_t> section_bytes;
  for (const std::vector<std::byte>& section : sections) section_bytes.push_back(section.size());
  EncodedChunkWriter writer(header, section_bytes);
  for (uint32_t layer = 0; layer < header.num_layers; ++layer) {
    if (sections[layer].empty()) continue;  // an empty vector's data() may be null
    std::memcpy(writer.section(layer).data(), sections[layer].data(), sections[layer].size());
  }
  return std::move(writer).Finish();
}

absl::StatusOr<EncodedChunk> EncodedChunk::Parse(std::span<const std::byte> encoded) {
  absl::StatusOr<EncodedChunk> chunk = ParseHead(encoded, encoded.size());
  if (chunk.ok()) chunk->frame_ = encoded;
  return chunk;
}

absl::StatusOr<EncodedChunk> EncodedChunk::ParseHead(std::span<const std::byte> head,
                                                     uint64_t frame_bytes) {
  // Sizes are checked against the frame's; bytes are read from the head only.
  const auto holds = [&](uint64_t need, std::string_view what) -> absl::Status {
    if (frame_bytes < need) return Truncated(frame_bytes, need, what);
    if (head.size() < need) {
      return absl::InvalidArgumentError(
          fmt::format("encoded chunk head: {} bytes given of a {}-byte frame, {} needs {}",
                      head.size(), frame_bytes, what, need));
    }
    return absl::OkStatus();
  };
  if (frame_bytes < sizeof(kEncodedMagic) || head.size() < sizeof(kEncodedMagic) ||
      Load<uint32_t>(head, 0) != kEncodedMagic) {
    return absl::InvalidArgumentError(fmt::format(
        "not an encoded chunk: {} bytes without the frame's magic \"SKVC\"", frame_bytes));
  }
  STRATA_RETURN_IF_ERROR(holds(kVersionOffset + sizeof(uint16_t), "the header"));
  const auto version = Load<uint16_t>(head, kVersionOffset);
  if (version < kOldestEncodedFormatVersion || version > kEncodedFormatVersion) {
    return absl::InvalidArgumentError(
        fmt::format("encoded chunk format version {}; this build reads versions {} to {}", version,
                    kOldestEncodedFormatVersion, kEncodedFormatVersion));
  }
  STRATA_RETURN_IF_ERROR(holds(kEncodedHeaderBytes, "the header"));
  const auto num_layers = Load<uint32_t>(head, kNumLayersOffset);
  const uint64_t overhead = EncodedFrameOverheadBytes(num_layers);
  STRATA_RETURN_IF_ERROR(holds(overhead, fmt::format("a table of {} layers", num_layers)));
  const uint64_t checksum = Hash(head.subspan(kChecksummedFrom, overhead - kChecksummedFrom));
  if (checksum != Load<uint64_t>(head, kChecksumOffset)) {
    return absl::DataLossError("encoded chunk header checksum mismatch");
  }

  EncodedChunk chunk;
  EncodedChunkHeader& h = chunk.header_;
  h.format_version = version;
  ByteReader in(std::string_view(reinterpret_cast<const char*>(head.data()), overhead)
                    .substr(kVersionOffset + sizeof(uint16_t)));
  uint16_t codec = 0;
  STRATA_CHECK(in.Raw(&codec, sizeof(codec)) && in.U64(h.layout_fingerprint) &&
               in.U32(h.num_tokens) && in.U32(h.num_layers) && in.U32(h.group_size) &&
               in.U64(h.decoded_bytes) && in.U64(h.encoded_bytes));
  h.codec = static_cast<CodecId>(codec);
  if (h.encoded_bytes > frame_bytes) {
    return Truncated(frame_bytes, h.encoded_bytes, "the frame");
  }
  if (h.encoded_bytes < frame_bytes) {
    return absl::InvalidArgumentError(fmt::format("{} bytes follow the {}-byte encoded chunk",
                                                  frame_bytes - h.encoded_bytes, h.encoded_bytes));
  }
  chunk.offsets_.reserve(num_layers + 1);
  chunk.checksums_.reserve(num_layers);
  uint64_t offset = overhead;
  chunk.offsets_.push_back(offset);
  for (uint32_t layer = 0; layer < num_layers; ++layer) {
    uint64_t size = 0, section_checksum = 0;
    STRATA_CHECK(in.U64(size) && in.U64(section_checksum));
    if (size > frame_bytes - offset) {
      return absl::DataLossError(
          fmt::format("encoded chunk layer {} ({} bytes at {}) overruns the {}-byte frame", layer,
                      size, offset, frame_bytes));
    }
    offset += size;
    chunk.offsets_.push_back(offset);
    chunk.checksums_.push_back(section_checksum);
  }
  if (offset != frame_bytes) {
    return absl::DataLossError(
        fmt::format("encoded chunk sections end at {}, the frame at {}", offset, frame_bytes));
  }
  return chunk;
}

std::span<const std::byte> EncodedChunk::section(uint32_t layer) const {
  STRATA_CHECK_MSG(!frame_.empty(), "a frame parsed from its head holds no sections");
  return frame_.subspan(offsets_[layer], section_bytes(layer));
}

absl::Status EncodedChunk::VerifySection(uint32_t layer) const {
  if (Hash(section(layer)) != checksums_[layer]) {
    return absl::DataLossError(fmt::format("encoded chunk layer {} checksum mismatch", layer));
  }
  return absl::OkStatus();
}

absl::Status EncodedChunk::CheckWrittenBy(CodecId codec, const KvLayout& layout) const {
  if (header_.codec != codec) {
    return absl::InvalidArgumentError(fmt::format(
        "encoded chunk was written by codec {} (id {}), not {}", CodecIdName(header_.codec),
        static_cast<uint16_t>(header_.codec), CodecIdName(codec)));
  }
  if (header_.layout_fingerprint != layout.Fingerprint()) {
    return absl::InvalidArgumentError(
        fmt::format("encoded chunk was written for layout fingerprint {:016x}, not {:016x} ({})",
                    header_.layout_fingerprint, layout.Fingerprint(), layout.DebugString()));
  }
  if (header_.num_layers != layout.num_layers || header_.num_tokens == 0 ||
      header_.num_tokens > layout.chunk_tokens ||
      header_.decoded_bytes != layout.chunk_bytes(header_.num_tokens)) {
    return absl::DataLossError(fmt::format(
        "encoded chunk header ({} layers, {} tokens, {} decoded bytes) disagrees with its layout "
        "({})",
        header_.num_layers, header_.num_tokens, header_.decoded_bytes, layout.DebugString()));
  }
  return absl::OkStatus();
}

}  // namespace strata::storage
