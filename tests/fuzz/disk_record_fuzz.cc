// Fuzzes the disk tier's on-disk parsers (storage/disk/record_format.h, segment_file.h): the
// record header block recovery reads back from a segment file, the binary ChunkKey inside it (also
// the RocksDB index's key), and segment file names found in the tier's directory.
//
// Input: byte 0 selects the parser; the rest is its input.
//   0: a header block (zero-padded or cut to kRecordHeaderBytes), its checksum kept as given.
//   1: the same, but the header checksum (bytes 112..120) is recomputed first, so the fuzzer
//      reaches the field checks behind it.
//   2: DecodeKey's bytes.   3: a segment file name.
//   4: a segment: records one after the other, walked as recovery walks them (header, then
//      RecordBytes(payload_bytes) further) until a header does not decode.
// Invalid bytes must be rejected with kDataLoss / nullopt; what decodes must encode back to an
// equal value.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "storage/disk/record_format.h"
#include "storage/disk/segment_file.h"
#include "tests/fuzz/fuzz_check.h"
#include "xxhash.h"

namespace storage = strata::storage;

namespace {

constexpr size_t kHeaderChecksumOffset = 112;

bool SameHeader(const storage::RecordHeader& a, const storage::RecordHeader& b) {
  return a.key == b.key && a.layout_fingerprint == b.layout_fingerprint &&
         a.payload_bytes == b.payload_bytes && a.payload_checksum == b.payload_checksum &&
         a.num_tokens == b.num_tokens;
}

// Decodes one header block; what decodes must survive an encode/decode round trip.
absl::Status CheckHeader(std::span<const std::byte> block) {
  auto header = storage::DecodeRecordHeader(block);
  if (!header.ok()) {
    FUZZ_CHECK(header.status().code() == absl::StatusCode::kDataLoss);
    return header.status();
  }
  std::vector<std::byte> encoded(storage::kRecordHeaderBytes);
  storage::EncodeRecordHeader(*header, encoded);
  auto again = storage::DecodeRecordHeader(encoded);
  FUZZ_CHECK(again.ok() && SameHeader(*again, *header));
  return absl::OkStatus();
}

std::vector<std::byte> HeaderBlock(const uint8_t* data, size_t size) {
  std::vector<std::byte> block(storage::kRecordHeaderBytes);
  std::memcpy(block.data(), data, std::min<size_t>(size, block.size()));
  return block;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  ++data;
  --size;
  switch (mode) {
    case 0:
      (void)CheckHeader(HeaderBlock(data, size));
      break;
    case 1: {
      std::vector<std::byte> block = HeaderBlock(data, size);
      const uint64_t checksum = XXH3_64bits(block.data(), kHeaderChecksumOffset);
      std::memcpy(block.data() + kHeaderChecksumOffset, &checksum, sizeof(checksum));
      (void)CheckHeader(block);
      break;
    }
    case 2: {
      const std::string_view bytes(reinterpret_cast<const char*>(data), size);
      auto key = storage::DecodeKey(bytes);
      if (!key.ok()) {
        FUZZ_CHECK(key.status().code() == absl::StatusCode::kDataLoss);
        break;
      }
      FUZZ_CHECK(storage::EncodeKey(*key) == bytes);
      break;
    }
    case 3: {
      const std::string name(reinterpret_cast<const char*>(data), size);
      const std::optional<uint64_t> id = storage::SegmentFile::ParseFileName(name);
      if (id.has_value()) {
        FUZZ_CHECK(storage::SegmentFile::ParseFileName(storage::SegmentFile::FileName(*id)) == id);
      }
      break;
    }
    case 4: {
      const auto* bytes = reinterpret_cast<const std::byte*>(data);
      uint64_t offset = 0;
      while (size - offset >= storage::kRecordHeaderBytes) {
        auto header = storage::DecodeRecordHeader({bytes + offset, storage::kRecordHeaderBytes});
        if (!header.ok()) break;
        const uint64_t record_bytes = storage::RecordBytes(header->payload_bytes);
        FUZZ_CHECK(record_bytes >= storage::kRecordHeaderBytes);
        if (record_bytes > size - offset) break;
        offset += record_bytes;
      }
      break;
    }
    default:
      break;
  }
  return 0;
}
