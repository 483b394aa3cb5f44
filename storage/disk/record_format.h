// On-disk record format of the disk tier's segment files, and the binary form of a ChunkKey.
//
// A record is a 4 KiB header block followed by the payload, zero-padded to a multiple of 4 KiB,
// so every record starts and ends on a kIoAlignment boundary and can be read with O_DIRECT.
// Header block, little-endian, fixed offsets (the rest of the block is zero):
//   0  magic u64 ("STRTDSK1")     8  format version u32       12 header bytes u32 (4096)
//   16 payload bytes u64          24 payload xxh3-64 u64      32 layout fingerprint u64
//   40 num_tokens u32             44 key bytes u16            46 codec id u16 (0 in version 1)
//   48 key (EncodeKey, <= 64)     112 xxh3-64 of bytes [0, 112) u64
// Version 2, a record whose payload is the chunk encoded by a codec (storage/codec: an encoded
// frame), adds:
//   120 decoded bytes u64         128 decoded xxh3-64 u64     136 xxh3-64 of bytes [120, 136) u64
// A chunk stored as it is is written as version 1, so a daemon that knows only version 1 reads
// it. Either version may name the tenant that stored the chunk, in bytes no earlier reader looks
// at (so the version does not change):
//   248 xxh3-64 of bytes [256, 258 + n) u64   256 tenant bytes n u16   258 tenant (n bytes)
// all zero for a chunk of no tenant (""), n <= kMaxRecordTenantBytes. A header whose magic,
// version, sizes, key or checksum is wrong is torn or corrupt (kDataLoss). Pure functions;
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/stored_encoding.h"
#include "storage/io/aligned_buffer.h"

namespace strata::storage {

inline constexpr uint64_t kRecordMagic = 0x314B534454525453ull;  // "STRTDSK1"
inline constexpr uint32_t kRecordFormatVersion = 1;
inline constexpr uint32_t kEncodedRecordFormatVersion = 2;
inline constexpr uint64_t kRecordHeaderBytes = kIoAlignment;
// The longest tenant name a record holds.
inline constexpr size_t kMaxRecordTenantBytes = 1024;

struct RecordHeader {
  ChunkKey key;
  uint64_t layout_fingerprint = 0;
  uint64_t payload_bytes = 0;  // stored (encoded, when encoding.encoded())
  uint64_t payload_checksum = 0;
  uint32_t num_tokens = 0;
  StoredEncoding encoding;
  std::string tenant;  // "" for none; at most kMaxRecordTenantBytes
};

// Bytes a record with `payload_bytes` of payload occupies in its segment.
inline constexpr uint64_t RecordBytes(uint64_t payload_bytes) {
  return kRecordHeaderBytes + AlignUp(payload_bytes);
}

// Writes `header` into `block` (kRecordHeaderBytes long), zeroing the rest of it. The tenant
// must fit (checked).
void EncodeRecordHeader(const RecordHeader& header, std::span<std::byte> block);

// Parses a header block; kDataLoss when it is not a valid header of this format.
absl::StatusOr<RecordHeader> DecodeRecordHeader(std::span<const std::byte> block);

// A key as bytes: algorithm u8, namespace u8, layout fingerprint u64 (little-endian), digest.
// Equal keys give equal bytes and different keys different bytes.
std::string EncodeKey(const ChunkKey& key);
// Parses EncodeKey's form; kDataLoss when malformed.
absl::StatusOr<ChunkKey> DecodeKey(std::string_view bytes);

}  // namespace strata::storage
