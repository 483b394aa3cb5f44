#include "storage/disk/record_format.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "storage/host/payload_view.h"
#include "storage/host/test_util.h"

namespace strata::storage {
namespace {

using testing::Pattern;
using testing::SyntheticKey;

TEST(RecordFormatTest, HeaderRoundTripsAndRejectsAnyCorruption) {
  const RecordHeader header{.key = SyntheticKey(0xABCDu, 42),
                            .layout_fingerprint = 0xABCDu,
                            .payload_bytes = 12345,
                            .payload_checksum = 0x1122334455667788u,
                            .num_tokens = 256};
  AlignedBuffer block(kRecordHeaderBytes);
  EncodeRecordHeader(header, block.span());
  auto decoded = DecodeRecordHeader(block.span());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->key, header.key);
  EXPECT_EQ(decoded->layout_fingerprint, header.layout_fingerprint);
  EXPECT_EQ(decoded->payload_bytes, header.payload_bytes);
  EXPECT_EQ(decoded->payload_checksum, header.payload_checksum);
  EXPECT_EQ(decoded->num_tokens, header.num_tokens);

  for (size_t offset : {0u, 9u, 20u, 30u, 50u, 113u}) {
    AlignedBuffer copy(kRecordHeaderBytes);
    std::memcpy(copy.data(), block.data(), kRecordHeaderBytes);
    copy.data()[offset] ^= std::byte{0x10};
    EXPECT_EQ(DecodeRecordHeader(copy.span()).status().code(), absl::StatusCode::kDataLoss)
        << "flipped byte " << offset;
  }
  AlignedBuffer zeros(kRecordHeaderBytes);
  EXPECT_EQ(DecodeRecordHeader(zeros.span()).status().code(), absl::StatusCode::kDataLoss);
}

TEST(RecordFormatTest, AnEncodedRecordIsVersionTwoAndItsEncodingIsChecked) {
  const RecordHeader header{
      .key = SyntheticKey(0xABCDu, 7),
      .layout_fingerprint = 0xABCDu,
      .payload_bytes = 3000,
      .payload_checksum = 0x99u,
      .num_tokens = 16,
      .encoding = {.codec = 1, .decoded_bytes = 5900, .decoded_checksum = 0x5555666677778888u}};
  AlignedBuffer block(kRecordHeaderBytes);
  EncodeRecordHeader(header, block.span());
  uint32_t version = 0;
  std::memcpy(&version, block.data() + 8, 4);
  EXPECT_EQ(version, kEncodedRecordFormatVersion);
  auto decoded = DecodeRecordHeader(block.span());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->encoding, header.encoding);
  EXPECT_EQ(decoded->payload_bytes, 3000u);

  // A flipped byte in either checksummed range, or a codec that disagrees with the version.
  for (size_t offset : {46u, 47u, 121u, 130u, 137u}) {
    AlignedBuffer copy(kRecordHeaderBytes);
    std::memcpy(copy.data(), block.data(), kRecordHeaderBytes);
    copy.data()[offset] ^= std::byte{0x10};
    EXPECT_EQ(DecodeRecordHeader(copy.span()).status().code(), absl::StatusCode::kDataLoss)
        << "flipped byte " << offset;
  }
  // A plain record is version 1 and says nothing of an encoding.
  RecordHeader plain = header;
  plain.encoding = {};
  EncodeRecordHeader(plain, block.span());
  std::memcpy(&version, block.data() + 8, 4);
  EXPECT_EQ(version, kRecordFormatVersion);
  decoded = DecodeRecordHeader(block.span());
  ASSERT_TRUE(decoded.ok());
  EXPECT_FALSE(decoded->encoding.encoded());
}

TEST(RecordFormatTest, ATenantRidesInEitherVersionAndIsChecked) {
  for (uint16_t codec : {uint16_t{0}, uint16_t{1}}) {
    RecordHeader header{.key = SyntheticKey(0xABCDu, 9),
                        .layout_fingerprint = 0xABCDu,
                        .payload_bytes = 4000,
                        .payload_checksum = 0x77u,
                        .num_tokens = 16,
                        .tenant = "tenant-a"};
    if (codec != 0)
      header.encoding = {.codec = codec, .decoded_bytes = 8000, .decoded_checksum = 3};
    AlignedBuffer block(kRecordHeaderBytes);
    EncodeRecordHeader(header, block.span());
    uint32_t version = 0;
    std::memcpy(&version, block.data() + 8, 4);
    EXPECT_EQ(version, codec == 0 ? kRecordFormatVersion : kEncodedRecordFormatVersion);
    auto decoded = DecodeRecordHeader(block.span());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->tenant, "tenant-a");
    EXPECT_EQ(decoded->encoding, header.encoding);

    // The tenant's size, its bytes and its checksum are checked.
    for (size_t offset : {248u, 256u, 258u, 265u}) {
      AlignedBuffer copy(kRecordHeaderBytes);
      std::memcpy(copy.data(), block.data(), kRecordHeaderBytes);
      copy.data()[offset] ^= std::byte{0x01};
      EXPECT_EQ(DecodeRecordHeader(copy.span()).status().code(), absl::StatusCode::kDataLoss)
          << "codec " << codec << ", flipped byte " << offset;
    }
    // The longest tenant fits; a size past it is corrupt whatever the checksum says.
    header.tenant.assign(kMaxRecordTenantBytes, 't');
    EncodeRecordHeader(header, block.span());
    decoded = DecodeRecordHeader(block.span());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->tenant, header.tenant);
    const uint16_t too_long = kMaxRecordTenantBytes + 1;
    std::memcpy(block.data() + 256, &too_long, 2);
    EXPECT_EQ(DecodeRecordHeader(block.span()).status().code(), absl::StatusCode::kDataLoss);

    // No tenant: the area stays zero, as in a record written before tenants were recorded.
    header.tenant.clear();
    EncodeRecordHeader(header, block.span());
    for (size_t offset = 248; offset < 258 + 16; ++offset) {
      EXPECT_EQ(block.data()[offset], std::byte{0}) << offset;
    }
    decoded = DecodeRecordHeader(block.span());
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(decoded->tenant, "");
  }
}

TEST(RecordFormatTest, KeysRoundTripAndMalformedKeysAreDataLoss) {
  const ChunkKey key = SyntheticKey(7, 1);
  auto decoded = DecodeKey(EncodeKey(key));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, key);
  EXPECT_NE(EncodeKey(key), EncodeKey(SyntheticKey(7, 2)));
  EXPECT_NE(EncodeKey(key), EncodeKey(SyntheticKey(8, 1)));
  std::string bad = EncodeKey(key);
  bad.pop_back();
  EXPECT_EQ(DecodeKey(bad).status().code(), absl::StatusCode::kDataLoss);
  bad = EncodeKey(key);
  bad[0] = 9;
  EXPECT_EQ(DecodeKey(bad).status().code(), absl::StatusCode::kDataLoss);
}

TEST(RecordFormatTest, RecordBytesArePaddedToTheAlignment) {
  EXPECT_EQ(RecordBytes(0), kRecordHeaderBytes);
  EXPECT_EQ(RecordBytes(1), kRecordHeaderBytes + kIoAlignment);
  EXPECT_EQ(RecordBytes(kIoAlignment), kRecordHeaderBytes + kIoAlignment);
  EXPECT_EQ(RecordBytes(kIoAlignment + 1), kRecordHeaderBytes + 2 * kIoAlignment);
}

TEST(ChecksumStreamTest, PiecesHashLikeTheWhole) {
  const std::vector<std::byte> bytes = Pattern(5, 100000);
  ChecksumStream stream;
  stream.Update({bytes.data(), 1});
  stream.Update({bytes.data() + 1, 4095});
  stream.Update({bytes.data() + 4096, bytes.size() - 4096});
  EXPECT_EQ(stream.Digest(), ChecksumBytes(bytes));
}

}  // namespace
}  // namespace strata::storage
