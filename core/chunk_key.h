// ChunkKey names one chunk of KV in every tier, process and run. It carries the hash algorithm
// and namespace that produced it, the fingerprint of the KvLayout the chunk holds, and the 16- or
// 32-byte digest; keys compare as bytes over all of these. A plain value type; thread-compatible.
//
// Keys are produced by KeyHasher (core/key_hasher.h); this header knows nothing of hashing.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace strata {

enum class HashAlgorithm : uint8_t {
  kXxh3_128 = 1,    // 16-byte digests; Strata's default (fast)
  kSha256Cbor = 2,  // 32-byte digests; bit-exact with vLLM's "sha256_cbor" prefix hashing
};

// "xxh3_128" or "sha256_cbor".
const char* HashAlgorithmName(HashAlgorithm algorithm);
// Parses a name printed by HashAlgorithmName; kInvalidArgument for anything else.
absl::StatusOr<HashAlgorithm> ParseHashAlgorithm(std::string_view name);
// Digest size of `algorithm` in bytes (16 or 32).
size_t DigestSizeBytes(HashAlgorithm algorithm);

enum class KeyNamespace : uint8_t {
  kPrefix = 1,               // chained on the previous chunk: valid only after that prefix
  kPositionIndependent = 2,  // no parent: the same tokens anywhere in a prompt (MEPIC/EPIC)
};

class ChunkKey {
 public:
  static constexpr size_t kMaxDigestBytes = 32;

  // The empty key: matches no chunk. empty() is true.
  ChunkKey() = default;

  // A key from its parts. `digest` must be DigestSizeBytes(algorithm) long (checked by Parse,
  // a DCHECK here: KeyHasher is the only other producer).
  static ChunkKey FromParts(HashAlgorithm algorithm, KeyNamespace ns, uint64_t layout_fingerprint,
                            std::span<const uint8_t> digest);

  // Parses ToString()'s form; kInvalidArgument on any malformed part.
  static absl::StatusOr<ChunkKey> Parse(std::string_view text);

  bool empty() const { return digest_size_ == 0; }
  HashAlgorithm algorithm() const { return algorithm_; }
  KeyNamespace key_namespace() const { return namespace_; }
  uint64_t layout_fingerprint() const { return layout_fingerprint_; }
  std::span<const uint8_t> digest() const { return {digest_.data(), digest_size_}; }

  // The 64-bit id vLLM's KV events use for this digest: its last 8 bytes read big-endian
  // (int.from_bytes(digest, "big") & (2**64 - 1)).
  uint64_t EventId() const;

  // "<algorithm>:<prefix|pic>:<16 hex of fingerprint>:<hex digest>", stable across versions.
  std::string ToString() const;

  friend bool operator==(const ChunkKey& a, const ChunkKey& b) { return a.Compare(b) == 0; }
  friend std::strong_ordering operator<=>(const ChunkKey& a, const ChunkKey& b) {
    return a.Compare(b) <=> 0;
  }

  // Digests are uniformly distributed, so 8 of their bytes mixed with the fingerprint hash well.
  template <typename H>
  friend H AbslHashValue(H h, const ChunkKey& key) {
    return H::combine(std::move(h), key.ShortHash());
  }
  uint64_t ShortHash() const {
    uint64_t head = 0;
    std::memcpy(&head, digest_.data(), sizeof(head));
    return head ^ (layout_fingerprint_ * 0x9E3779B97F4A7C15ull);
  }

 private:
  int Compare(const ChunkKey& other) const;

  uint64_t layout_fingerprint_ = 0;
  std::array<uint8_t, kMaxDigestBytes> digest_{};
  uint8_t digest_size_ = 0;
  HashAlgorithm algorithm_ = HashAlgorithm::kXxh3_128;
  KeyNamespace namespace_ = KeyNamespace::kPrefix;
};

// For std::unordered_map and friends.
struct ChunkKeyHash {
  size_t operator()(const ChunkKey& key) const { return key.ShortHash(); }
};

}  // namespace strata
