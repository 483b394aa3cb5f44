#include "core/chunk_key.h"

#include <algorithm>
#include <charconv>
#include <optional>
#include <vector>

#include "core/check.h"
#include "core/hex.h"
#include "fmt/format.h"

namespace strata {

const char* HashAlgorithmName(HashAlgorithm algorithm) {
  switch (algorithm) {
    case HashAlgorithm::kXxh3_128:
      return "xxh3_128";
    case HashAlgorithm::kSha256Cbor:
      return "sha256_cbor";
  }
  return "unknown";
}

absl::StatusOr<HashAlgorithm> ParseHashAlgorithm(std::string_view name) {
  if (name == "xxh3_128") return HashAlgorithm::kXxh3_128;
  if (name == "sha256_cbor") return HashAlgorithm::kSha256Cbor;
  return absl::InvalidArgumentError(
      fmt::format("unknown hash algorithm '{}' (expected xxh3_128 or sha256_cbor)", name));
}

size_t DigestSizeBytes(HashAlgorithm algorithm) {
  return algorithm == HashAlgorithm::kSha256Cbor ? 32 : 16;
}

ChunkKey ChunkKey::FromParts(HashAlgorithm algorithm, KeyNamespace ns, uint64_t layout_fingerprint,
                             std::span<const uint8_t> digest) {
  STRATA_DCHECK(digest.size() == DigestSizeBytes(algorithm));
  ChunkKey key;
  key.algorithm_ = algorithm;
  key.namespace_ = ns;
  key.layout_fingerprint_ = layout_fingerprint;
  key.digest_size_ = static_cast<uint8_t>(std::min(digest.size(), kMaxDigestBytes));
  std::copy_n(digest.begin(), key.digest_size_, key.digest_.begin());
  return key;
}

absl::StatusOr<ChunkKey> ChunkKey::Parse(std::string_view text) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t colon = text.find(':', start);
    parts.push_back(text.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (parts.size() != 4) {
    return absl::InvalidArgumentError(fmt::format(
        "malformed chunk key '{}': expected <algorithm>:<prefix|pic>:<fingerprint>:<hex>", text));
  }
  absl::StatusOr<HashAlgorithm> algorithm = ParseHashAlgorithm(parts[0]);
  if (!algorithm.ok()) return algorithm.status();
  KeyNamespace ns;
  if (parts[1] == "prefix") {
    ns = KeyNamespace::kPrefix;
  } else if (parts[1] == "pic") {
    ns = KeyNamespace::kPositionIndependent;
  } else {
    return absl::InvalidArgumentError(
        fmt::format("malformed chunk key: namespace '{}' is not prefix or pic", parts[1]));
  }
  uint64_t fingerprint = 0;
  const std::string_view fp = parts[2];
  if (fp.size() != 16 || std::from_chars(fp.data(), fp.data() + fp.size(), fingerprint, 16).ptr !=
                             fp.data() + fp.size()) {
    return absl::InvalidArgumentError(
        fmt::format("malformed chunk key: fingerprint '{}' is not 16 hex digits", fp));
  }
  const size_t digest_size = DigestSizeBytes(*algorithm);
  std::optional<std::vector<uint8_t>> digest = HexDecode(parts[3]);
  if (!digest.has_value() || digest->size() != digest_size) {
    return absl::InvalidArgumentError(fmt::format(
        "malformed chunk key: digest '{}' is not {} hex digits", parts[3], 2 * digest_size));
  }
  return FromParts(*algorithm, ns, fingerprint, *digest);
}

uint64_t ChunkKey::EventId() const {
  uint64_t id = 0;
  const size_t start = digest_size_ >= 8 ? digest_size_ - 8 : 0;
  for (size_t i = start; i < digest_size_; ++i) id = (id << 8) | digest_[i];
  return id;
}

std::string ChunkKey::ToString() const {
  if (empty()) return "<empty>";
  return fmt::format("{}:{}:{:016x}:{}", HashAlgorithmName(algorithm_),
                     namespace_ == KeyNamespace::kPrefix ? "prefix" : "pic", layout_fingerprint_,
                     HexEncode(digest()));
}

int ChunkKey::Compare(const ChunkKey& other) const {
  if (algorithm_ != other.algorithm_) return algorithm_ < other.algorithm_ ? -1 : 1;
  if (namespace_ != other.namespace_) return namespace_ < other.namespace_ ? -1 : 1;
  if (layout_fingerprint_ != other.layout_fingerprint_) {
    return layout_fingerprint_ < other.layout_fingerprint_ ? -1 : 1;
  }
  if (digest_size_ != other.digest_size_) return digest_size_ < other.digest_size_ ? -1 : 1;
  return std::memcmp(digest_.data(), other.digest_.data(), digest_size_);
}

}  // namespace strata
