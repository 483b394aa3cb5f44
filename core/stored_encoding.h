// StoredEncoding: how a tier stores a chunk's payload, as the chunk itself or as a codec's
// encoded frame (storage/codec). The disk tier writes it into its records (storage/disk/
// record_format.h); the host tier keeps it beside the chunks Compress encoded in place. A plain
// value; no threading or ownership concerns.
#pragma once

#include <bit>
#include <cstdint>

namespace strata {

// How a stored payload relates to the chunk: the chunk itself (codec 0), or its encoded frame,
// which decodes to decoded_bytes bytes whose xxh3-64 is decoded_checksum.
struct StoredEncoding {
  uint16_t codec = 0;  // a CodecId; 0: stored as it is
  uint64_t decoded_bytes = 0;
  uint64_t decoded_checksum = 0;
  // The error of the decoded chunk against the chunk it was encoded from, when the encoder
  // measured it (Compress, and [disk] codec's writes); -1: not measured. The disk tier keeps it
  // in its index only (DiskIndex), not in the record header: a record re-indexed from its header
  // has none.
  float relative_error = -1;
  float max_abs_error = -1;

  bool encoded() const { return codec != 0; }
  // Field by field, the errors bit for bit: an error measured on KV that holds a NaN is a NaN,
  // and the record must still equal itself (DiskTier::Replace and DropCorrupt match on it).
  friend bool operator==(const StoredEncoding& a, const StoredEncoding& b) {
    return a.codec == b.codec && a.decoded_bytes == b.decoded_bytes &&
           a.decoded_checksum == b.decoded_checksum &&
           std::bit_cast<uint32_t>(a.relative_error) == std::bit_cast<uint32_t>(b.relative_error) &&
           std::bit_cast<uint32_t>(a.max_abs_error) == std::bit_cast<uint32_t>(b.max_abs_error);
  }
};

}  // namespace strata
