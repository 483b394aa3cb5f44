#include "storage/disk/record_format.h"

#include <cstring>

#include "core/check.h"
#include "fmt/format.h"
#include "storage/host/payload_view.h"

namespace strata::storage {
namespace {

constexpr size_t kKeyOffset = 48;
constexpr size_t kMaxKeyBytes = 64;
constexpr size_t kHeaderChecksumOffset = kKeyOffset + kMaxKeyBytes;
constexpr size_t kKeyFixedBytes = 1 + 1 + 8;
constexpr size_t kEncodingOffset = kHeaderChecksumOffset + 8;  // version 2's fields
constexpr size_t kEncodingChecksumOffset = kEncodingOffset + 16;
constexpr size_t kTenantChecksumOffset = 248;
constexpr size_t kTenantOffset = 256;  // its size u16, then its bytes
static_assert(kTenantOffset + 2 + kMaxRecordTenantBytes <= kRecordHeaderBytes);

template <typename T>
void Store(std::span<std::byte> block, size_t offset, T value) {
  std::memcpy(block.data() + offset, &value, sizeof(T));
}

template <typename T>
T Load(std::span<const std::byte> bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

}  // namespace

std::string EncodeKey(const ChunkKey& key) {
  std::string out(kKeyFixedBytes + key.digest().size(), '\0');
  out[0] = static_cast<char>(key.algorithm());
  out[1] = static_cast<char>(key.key_namespace());
  const uint64_t fingerprint = key.layout_fingerprint();
  std::memcpy(out.data() + 2, &fingerprint, sizeof(fingerprint));
  std::memcpy(out.data() + kKeyFixedBytes, key.digest().data(), key.digest().size());
  return out;
}

absl::StatusOr<ChunkKey> DecodeKey(std::string_view bytes) {
  if (bytes.size() < kKeyFixedBytes) return absl::DataLossError("disk key: too short");
  const auto algorithm = static_cast<HashAlgorithm>(bytes[0]);
  const auto ns = static_cast<KeyNamespace>(bytes[1]);
  if (algorithm != HashAlgorithm::kXxh3_128 && algorithm != HashAlgorithm::kSha256Cbor) {
    return absl::DataLossError("disk key: unknown hash algorithm");
  }
  if (ns != KeyNamespace::kPrefix && ns != KeyNamespace::kPositionIndependent) {
    return absl::DataLossError("disk key: unknown namespace");
  }
  if (bytes.size() != kKeyFixedBytes + DigestSizeBytes(algorithm)) {
    return absl::DataLossError(fmt::format("disk key: {} bytes", bytes.size()));
  }
  uint64_t fingerprint = 0;
  std::memcpy(&fingerprint, bytes.data() + 2, sizeof(fingerprint));
  const auto* digest = reinterpret_cast<const uint8_t*>(bytes.data() + kKeyFixedBytes);
  return ChunkKey::FromParts(algorithm, ns, fingerprint, {digest, bytes.size() - kKeyFixedBytes});
}

void EncodeRecordHeader(const RecordHeader& header, std::span<std::byte> block) {
  STRATA_CHECK(block.size() == kRecordHeaderBytes);
  std::memset(block.data(), 0, block.size());
  const std::string key = EncodeKey(header.key);
  STRATA_CHECK(key.size() <= kMaxKeyBytes);
  const bool encoded = header.encoding.encoded();
  Store<uint64_t>(block, 0, kRecordMagic);
  Store<uint32_t>(block, 8, encoded ? kEncodedRecordFormatVersion : kRecordFormatVersion);
  Store<uint32_t>(block, 12, static_cast<uint32_t>(kRecordHeaderBytes));
  Store<uint64_t>(block, 16, header.payload_bytes);
  Store<uint64_t>(block, 24, header.payload_checksum);
  Store<uint64_t>(block, 32, header.layout_fingerprint);
  Store<uint32_t>(block, 40, header.num_tokens);
  Store<uint16_t>(block, 44, static_cast<uint16_t>(key.size()));
  Store<uint16_t>(block, 46, header.encoding.codec);
  std::memcpy(block.data() + kKeyOffset, key.data(), key.size());
  Store<uint64_t>(block, kHeaderChecksumOffset, ChecksumBytes(block.first(kHeaderChecksumOffset)));
  STRATA_CHECK(header.tenant.size() <= kMaxRecordTenantBytes);
  if (!header.tenant.empty()) {
    Store<uint16_t>(block, kTenantOffset, static_cast<uint16_t>(header.tenant.size()));
    std::memcpy(block.data() + kTenantOffset + 2, header.tenant.data(), header.tenant.size());
    Store<uint64_t>(block, kTenantChecksumOffset,
                    ChecksumBytes(block.subspan(kTenantOffset, 2 + header.tenant.size())));
  }
  if (!encoded) return;
  Store<uint64_t>(block, kEncodingOffset, header.encoding.decoded_bytes);
  Store<uint64_t>(block, kEncodingOffset + 8, header.encoding.decoded_checksum);
  Store<uint64_t>(block, kEncodingChecksumOffset,
                  ChecksumBytes(block.subspan(kEncodingOffset, 16)));
}

absl::StatusOr<RecordHeader> DecodeRecordHeader(std::span<const std::byte> block) {
  if (block.size() < kRecordHeaderBytes) return absl::DataLossError("record header: short");
  if (Load<uint64_t>(block, 0) != kRecordMagic) return absl::DataLossError("record header: magic");
  if (Load<uint64_t>(block, kHeaderChecksumOffset) !=
      ChecksumBytes(block.first(kHeaderChecksumOffset))) {
    return absl::DataLossError("record header: checksum mismatch");
  }
  const uint32_t version = Load<uint32_t>(block, 8);
  if ((version != kRecordFormatVersion && version != kEncodedRecordFormatVersion) ||
      Load<uint32_t>(block, 12) != kRecordHeaderBytes) {
    return absl::DataLossError("record header: unknown format version");
  }
  const uint16_t codec = Load<uint16_t>(block, 46);
  if ((version == kRecordFormatVersion) != (codec == 0)) {
    return absl::DataLossError("record header: codec and format version disagree");
  }
  if (codec != 0 && Load<uint64_t>(block, kEncodingChecksumOffset) !=
                        ChecksumBytes(block.subspan(kEncodingOffset, 16))) {
    return absl::DataLossError("record header: encoding checksum mismatch");
  }
  const uint16_t key_bytes = Load<uint16_t>(block, 44);
  if (key_bytes > kMaxKeyBytes) return absl::DataLossError("record header: key size");
  const uint16_t tenant_bytes = Load<uint16_t>(block, kTenantOffset);
  if (tenant_bytes > kMaxRecordTenantBytes) {
    return absl::DataLossError("record header: tenant size");
  }
  if (tenant_bytes != 0 && Load<uint64_t>(block, kTenantChecksumOffset) !=
                               ChecksumBytes(block.subspan(kTenantOffset, 2 + tenant_bytes))) {
    return absl::DataLossError("record header: tenant checksum mismatch");
  }
  RecordHeader header;
  auto key = DecodeKey(
      {reinterpret_cast<const char*>(block.data()) + kKeyOffset, static_cast<size_t>(key_bytes)});
  if (!key.ok()) return key.status();
  header.key = *key;
  header.payload_bytes = Load<uint64_t>(block, 16);
  header.payload_checksum = Load<uint64_t>(block, 24);
  header.layout_fingerprint = Load<uint64_t>(block, 32);
  header.num_tokens = Load<uint32_t>(block, 40);
  header.tenant.assign(reinterpret_cast<const char*>(block.data()) + kTenantOffset + 2,
                       tenant_bytes);
  if (codec != 0) {
    header.encoding = {.codec = codec,
                       .decoded_bytes = Load<uint64_t>(block, kEncodingOffset),
                       .decoded_checksum = Load<uint64_t>(block, kEncodingOffset + 8)};
  }
  return header;
}

}  // namespace strata::storage
