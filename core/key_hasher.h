// KeyHasher turns tokens into ChunkKeys: the key protocol of DESIGN.md section 3.
//
// Prefix chains, at KvLayout::chunk_tokens granularity:
//   key_i = H(key_{i-1} or root, tokens[i*C, (i+1)*C), extra); a lookup stops at the first miss.
//   - xxh3_128:    digest_i = XXH3_128("strata.prefix.v1" | parent | layout fingerprint |
//                  lora name | token count | tokens as u32 LE); root = XXH3_128("strata.root.v1" |
//                  seed | tenant salt).
//   - sha256_cbor: digest_i = SHA-256(canonical CBOR [parent, [tokens], extra]), root =
//                  SHA-256(CBOR text seed): bit-exact with vLLM's block hashes when chunk_tokens
//                  equals vLLM's block size and the seed equals PYTHONHASHSEED. extra is None, or
//                  [lora name?, tenant salt? (first chunk only, as vLLM's cache_salt)]. The layout
//                  fingerprint is carried in the ChunkKey beside the digest instead of inside the
//                  hash input, so the digests stay interoperable while layouts never collide.
// A partial last chunk is hashed over its real tokens, so its key differs from any full chunk's.
//
// Position-independent chunks (MEPIC/EPIC), no parent, a namespace of their own:
//   digest = H("strata.pic.v1", layout fingerprint, compile variant, canonical padded tokens),
//   or for a tenant's chunks H("strata.pic.tenant.v1", tenant salt, layout fingerprint, compile
//   variant, canonical padded tokens) (CBOR: a 5-item array), so tenants never share them.
//
// Nothing here is process-random: the same layout, options and tokens give the same keys in
// every process and on every run. Thread-safe (all methods are const).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"

namespace strata {

struct KeyHasherOptions {
  HashAlgorithm algorithm = HashAlgorithm::kXxh3_128;
  // The chain's root seed; configuration, never random (vLLM: the PYTHONHASHSEED string).
  std::string seed = "0";
};

// Per-request inputs that enter prefix keys besides the tokens.
struct KeyExtras {
  std::string_view tenant_salt;  // empty: the shared (unsalted) namespace
  std::string_view lora_name;    // empty: the base model
};

enum class PartialChunk {
  kExclude,  // only full chunks get keys
  kInclude,  // a trailing partial chunk gets a key over its real tokens
};

class KeyHasher {
 public:
  // kInvalidArgument if `layout` does not validate.
  static absl::StatusOr<KeyHasher> Create(const KvLayout& layout, KeyHasherOptions options);

  const KvLayout& layout() const { return layout_; }
  uint64_t layout_fingerprint() const { return fingerprint_; }
  HashAlgorithm algorithm() const { return options_.algorithm; }
  uint32_t chunk_tokens() const { return layout_.chunk_tokens; }

  // Keys of the chain over `tokens`, one per chunk_tokens tokens, in order.
  std::vector<ChunkKey> PrefixKeys(std::span<const uint32_t> tokens, const KeyExtras& extras,
                                   PartialChunk partial = PartialChunk::kExclude) const;

  // The key of the chunk holding `chunk_tokens` that follows `parent`; an empty `parent` means
  // the first chunk of a prompt. For building chains incrementally as a prompt grows.
  ChunkKey NextPrefixKey(const ChunkKey& parent, std::span<const uint32_t> chunk_tokens,
                         const KeyExtras& extras) const;

  // The key of a position-independent chunk whose tokens are already canonical (see
  // CanonicalPicTokens); `compile_variant` names how its KV was produced (for example the
  // number of dummy tokens prefilled before it), because different variants hold different KV.
  // A non-empty `tenant_salt` keys the chunk in that tenant's namespace (its own domain string,
  // so no salted key equals an unsalted one); empty: the shared namespace.
  ChunkKey PicKey(std::span<const uint32_t> canonical_tokens, uint32_t compile_variant,
                  std::string_view tenant_salt = {}) const;

  // The root digest of prefix chains for `tenant_salt` (for `strata hash` and tests).
  std::vector<uint8_t> RootDigest(std::string_view tenant_salt) const;

 private:
  KeyHasher(KvLayout layout, KeyHasherOptions options);

  KvLayout layout_;
  KeyHasherOptions options_;
  uint64_t fingerprint_;
  std::vector<uint8_t> sha_none_hash_;  // sha256_cbor root (salt travels in extra instead)
};

// MEPIC's canonical form of a position-independent chunk: `tokens` with leading `pad_token`s so
// that its length is a multiple of `block_tokens` and it ends on a block boundary.
// `block_tokens` must be > 0.
std::vector<uint32_t> CanonicalPicTokens(std::span<const uint32_t> tokens, uint32_t block_tokens,
                                         uint32_t pad_token);

}  // namespace strata
