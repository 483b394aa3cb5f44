#include "core/key_hasher.h"

#include <openssl/evp.h>
#define XXH_INLINE_ALL  // inlined XXH3: no call overhead on the hashing hot paths
#include <xxhash.h>

#include <bit>
#include <memory>

#include "core/cbor_writer.h"
#include "core/check.h"

namespace strata {
namespace {

static_assert(std::endian::native == std::endian::little,
              "xxh3 chain hashing feeds token ids as little-endian u32 straight from memory");

constexpr std::string_view kRootDomain = "strata.root.v1";
constexpr std::string_view kPrefixDomain = "strata.prefix.v1";
constexpr std::string_view kPicDomain = "strata.pic.v1";
constexpr std::string_view kTenantPicDomain = "strata.pic.tenant.v1";

// Streams length-delimited fields into an XXH3-128 state.
class Xxh3Stream {
 public:
  Xxh3Stream() { XXH3_128bits_reset(&state_); }
  void Raw(const void* data, size_t size) { XXH3_128bits_update(&state_, data, size); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void String(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    Raw(s.data(), s.size());
  }
  void Tokens(std::span<const uint32_t> tokens) {
    U32(static_cast<uint32_t>(tokens.size()));
    Raw(tokens.data(), tokens.size_bytes());
  }
  std::array<uint8_t, 16> Digest() {
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(&state_));
    std::array<uint8_t, 16> out;
    std::memcpy(out.data(), canonical.digest, out.size());
    return out;
  }

 private:
  XXH3_state_t state_;
};

// SHA-256 of `data` with a per-thread reusable OpenSSL context.
std::array<uint8_t, 32> Sha256(std::string_view data) {
  struct CtxDeleter {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  thread_local std::unique_ptr<EVP_MD_CTX, CtxDeleter> ctx(EVP_MD_CTX_new());
  static const EVP_MD* const sha256 = EVP_sha256();
  std::array<uint8_t, 32> out;
  unsigned int size = 0;
  const bool ok = ctx && EVP_DigestInit_ex(ctx.get(), sha256, nullptr) == 1 &&
                  EVP_DigestUpdate(ctx.get(), data.data(), data.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx.get(), out.data(), &size) == 1 && size == out.size();
  STRATA_CHECK_MSG(ok, "OpenSSL SHA-256 failed");  // only on allocation failure in OpenSSL
  return out;
}

CborWriter& ThreadCbor() {
  thread_local CborWriter writer;
  writer.Clear();
  return writer;
}

}  // namespace

absl::StatusOr<KeyHasher> KeyHasher::Create(const KvLayout& layout, KeyHasherOptions options) {
  if (absl::Status status = layout.Validate(); !status.ok()) return status;
  if (options.algorithm != HashAlgorithm::kXxh3_128 &&
      options.algorithm != HashAlgorithm::kSha256Cbor) {
    return absl::InvalidArgumentError("unknown hash algorithm");
  }
  return KeyHasher(layout, std::move(options));
}

KeyHasher::KeyHasher(KvLayout layout, KeyHasherOptions options)
    : layout_(std::move(layout)),
      options_(std::move(options)),
      fingerprint_(layout_.Fingerprint()) {
  if (options_.algorithm == HashAlgorithm::kSha256Cbor) {
    CborWriter& cbor = ThreadCbor();
    cbor.Text(options_.seed);
    const auto digest = Sha256(cbor.bytes());
    sha_none_hash_.assign(digest.begin(), digest.end());
  }
}

std::vector<uint8_t> KeyHasher::RootDigest(std::string_view tenant_salt) const {
  if (options_.algorithm == HashAlgorithm::kSha256Cbor) return sha_none_hash_;
  Xxh3Stream stream;
  stream.String(kRootDomain);
  stream.String(options_.seed);
  stream.String(tenant_salt);
  const auto digest = stream.Digest();
  return {digest.begin(), digest.end()};
}

ChunkKey KeyHasher::NextPrefixKey(const ChunkKey& parent, std::span<const uint32_t> chunk_tokens,
                                  const KeyExtras& extras) const {
  const bool first = parent.empty();
  std::vector<uint8_t> root;
  std::span<const uint8_t> parent_digest = parent.digest();
  if (first) {
    root = RootDigest(extras.tenant_salt);
    parent_digest = root;
  }

  if (options_.algorithm == HashAlgorithm::kXxh3_128) {
    Xxh3Stream stream;
    stream.String(kPrefixDomain);
    stream.Raw(parent_digest.data(), parent_digest.size());
    stream.U64(fingerprint_);
    stream.String(extras.lora_name);
    stream.Tokens(chunk_tokens);
    const auto digest = stream.Digest();
    return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, fingerprint_,
                               digest);
  }

  CborWriter& cbor = ThreadCbor();
  cbor.ArrayHeader(3);
  cbor.Bytes(parent_digest);
  cbor.UnsignedArray(chunk_tokens);
  const bool has_lora = !extras.lora_name.empty();
  const bool has_salt = first && !extras.tenant_salt.empty();
  if (!has_lora && !has_salt) {
    cbor.Null();
  } else {
    cbor.ArrayHeader((has_lora ? 1 : 0) + (has_salt ? 1 : 0));
    if (has_lora) cbor.Text(extras.lora_name);
    if (has_salt) cbor.Text(extras.tenant_salt);
  }
  const auto digest = Sha256(cbor.bytes());
  return ChunkKey::FromParts(HashAlgorithm::kSha256Cbor, KeyNamespace::kPrefix, fingerprint_,
                             digest);
}

std::vector<ChunkKey> KeyHasher::PrefixKeys(std::span<const uint32_t> tokens,
                                            const KeyExtras& extras, PartialChunk partial) const {
  const size_t chunk = layout_.chunk_tokens;
  size_t num_chunks = tokens.size() / chunk;
  if (partial == PartialChunk::kInclude && tokens.size() % chunk != 0) ++num_chunks;
  std::vector<ChunkKey> keys;
  keys.reserve(num_chunks);
  ChunkKey parent;
  for (size_t i = 0; i < num_chunks; ++i) {
    const size_t begin = i * chunk;
    const size_t count = std::min(chunk, tokens.size() - begin);
    parent = NextPrefixKey(parent, tokens.subspan(begin, count), extras);
    keys.push_back(parent);
  }
  return keys;
}

ChunkKey KeyHasher::PicKey(std::span<const uint32_t> canonical_tokens, uint32_t compile_variant,
                           std::string_view tenant_salt) const {
  const bool salted = !tenant_salt.empty();
  if (options_.algorithm == HashAlgorithm::kXxh3_128) {
    Xxh3Stream stream;
    if (salted) {
      stream.String(kTenantPicDomain);
      stream.String(tenant_salt);
    } else {
      stream.String(kPicDomain);
    }
    stream.U64(fingerprint_);
    stream.U32(compile_variant);
    stream.Tokens(canonical_tokens);
    return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPositionIndependent,
                               fingerprint_, stream.Digest());
  }
  CborWriter& cbor = ThreadCbor();
  cbor.ArrayHeader(salted ? 5 : 4);
  if (salted) {
    cbor.Text(kTenantPicDomain);
    cbor.Text(tenant_salt);
  } else {
    cbor.Text(kPicDomain);
  }
  cbor.Unsigned(fingerprint_);
  cbor.Unsigned(compile_variant);
  cbor.UnsignedArray(canonical_tokens);
  return ChunkKey::FromParts(HashAlgorithm::kSha256Cbor, KeyNamespace::kPositionIndependent,
                             fingerprint_, Sha256(cbor.bytes()));
}

std::vector<uint32_t> CanonicalPicTokens(std::span<const uint32_t> tokens, uint32_t block_tokens,
                                         uint32_t pad_token) {
  STRATA_DCHECK(block_tokens > 0);
  const size_t padded = (tokens.size() + block_tokens - 1) / block_tokens * block_tokens;
  std::vector<uint32_t> out(padded - tokens.size(), pad_token);
  out.insert(out.end(), tokens.begin(), tokens.end());
  return out;
}

}  // namespace strata
