// StoredEncoding: how a tier stores a chunk's payload, as the chunk itself or as a codec's
// encoded frame (storage/codec). The disk tier writes it into its records (storage/disk/
// record_format.h); the host tier keeps it beside the chunks Compress encoded in place. A plain
// value; no threading or ownership concerns. CodecSet: a set of codec ids (the codecs a reader
// decodes, the encoded forms a lease takes), also a plain value.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

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

// A set of codec ids (StoredEncoding::codec values). Ids 1 to 63 can be members; 0 (no codec) and
// ids of 64 and above never are: Add ignores them and Contains answers false.
class CodecSet {
 public:
  constexpr CodecSet() = default;
  // Every id a set can hold.
  static constexpr CodecSet All() { return CodecSet(~uint64_t{1}); }

  constexpr CodecSet& Add(uint32_t codec) {
    if (codec > 0 && codec < 64) bits_ |= uint64_t{1} << codec;
    return *this;
  }
  constexpr bool Contains(uint32_t codec) const {
    return codec > 0 && codec < 64 && ((bits_ >> codec) & 1) != 0;
  }
  constexpr bool empty() const { return bits_ == 0; }
  // The members, ascending.
  std::vector<uint32_t> Ids() const {
    std::vector<uint32_t> ids;
    for (uint64_t rest = bits_; rest != 0; rest &= rest - 1) {
      ids.push_back(static_cast<uint32_t>(std::countr_zero(rest)));
    }
    return ids;
  }
  friend constexpr bool operator==(CodecSet a, CodecSet b) { return a.bits_ == b.bits_; }

 private:
  explicit constexpr CodecSet(uint64_t bits) : bits_(bits) {}
  uint64_t bits_ = 0;
};

}  // namespace strata
