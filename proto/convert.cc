#include "proto/convert.h"

#include <string>

#include "fmt/format.h"

namespace strata {
namespace {

absl::Status BadEnum(const char* field, int value) {
  return absl::InvalidArgumentError(fmt::format("unknown {} value {}", field, value));
}

std::string ToStdString(absl::string_view s) { return std::string(s.data(), s.size()); }

}  // namespace

absl::StatusOr<KvLayout> FromProto(const v1::KvLayout& proto) {
  KvLayout layout;
  layout.model_id = proto.model_id();
  switch (proto.kind()) {
    case v1::KV_KIND_MHA:
      layout.kind = KvKind::kMha;
      break;
    case v1::KV_KIND_MLA_LATENT:
      layout.kind = KvKind::kMlaLatent;
      break;
    default:
      return BadEnum("layout.kind", proto.kind());
  }
  switch (proto.dtype()) {
    case v1::KV_DTYPE_FLOAT16:
      layout.dtype = KvDtype::kFloat16;
      break;
    case v1::KV_DTYPE_BFLOAT16:
      layout.dtype = KvDtype::kBfloat16;
      break;
    case v1::KV_DTYPE_FLOAT32:
      layout.dtype = KvDtype::kFloat32;
      break;
    case v1::KV_DTYPE_FP8_E4M3:
      layout.dtype = KvDtype::kFp8E4m3;
      break;
    case v1::KV_DTYPE_INT8:
      layout.dtype = KvDtype::kInt8;
      break;
    default:
      return BadEnum("layout.dtype", proto.dtype());
  }
  switch (proto.positional()) {
    case v1::POSITIONAL_FORMAT_ROPE_APPLIED:
      layout.positional = PositionalFormat::kRopeApplied;
      break;
    case v1::POSITIONAL_FORMAT_NOPE:
      layout.positional = PositionalFormat::kNope;
      break;
    default:
      return BadEnum("layout.positional", proto.positional());
  }
  layout.num_layers = proto.num_layers();
  layout.num_kv_heads = proto.num_kv_heads();
  layout.head_dim = proto.head_dim();
  layout.tp_rank = proto.tp_rank();
  layout.tp_world_size = proto.tp_world_size();
  layout.chunk_tokens =
      proto.chunk_tokens() == 0 ? KvLayout::kDefaultChunkTokens : proto.chunk_tokens();
  if (absl::Status status = layout.Validate(); !status.ok()) return status;
  return layout;
}

v1::KvLayout ToProto(const KvLayout& layout) {
  v1::KvLayout proto;
  proto.set_model_id(layout.model_id);
  proto.set_kind(layout.kind == KvKind::kMha ? v1::KV_KIND_MHA : v1::KV_KIND_MLA_LATENT);
  switch (layout.dtype) {
    case KvDtype::kFloat16:
      proto.set_dtype(v1::KV_DTYPE_FLOAT16);
      break;
    case KvDtype::kBfloat16:
      proto.set_dtype(v1::KV_DTYPE_BFLOAT16);
      break;
    case KvDtype::kFloat32:
      proto.set_dtype(v1::KV_DTYPE_FLOAT32);
      break;
    case KvDtype::kFp8E4m3:
      proto.set_dtype(v1::KV_DTYPE_FP8_E4M3);
      break;
    case KvDtype::kInt8:
      proto.set_dtype(v1::KV_DTYPE_INT8);
      break;
  }
  proto.set_positional(layout.positional == PositionalFormat::kRopeApplied
                           ? v1::POSITIONAL_FORMAT_ROPE_APPLIED
                           : v1::POSITIONAL_FORMAT_NOPE);
  proto.set_num_layers(layout.num_layers);
  proto.set_num_kv_heads(layout.num_kv_heads);
  proto.set_head_dim(layout.head_dim);
  proto.set_tp_rank(layout.tp_rank);
  proto.set_tp_world_size(layout.tp_world_size);
  proto.set_chunk_tokens(layout.chunk_tokens);
  return proto;
}

absl::StatusOr<HashAlgorithm> FromProto(v1::HashAlgorithm proto) {
  switch (proto) {
    case v1::HASH_ALGORITHM_XXH3_128:
      return HashAlgorithm::kXxh3_128;
    case v1::HASH_ALGORITHM_SHA256_CBOR:
      return HashAlgorithm::kSha256Cbor;
    default:
      return BadEnum("hash algorithm", proto);
  }
}

v1::HashAlgorithm ToProto(HashAlgorithm algorithm) {
  return algorithm == HashAlgorithm::kXxh3_128 ? v1::HASH_ALGORITHM_XXH3_128
                                               : v1::HASH_ALGORITHM_SHA256_CBOR;
}

absl::StatusOr<KeyNamespace> FromProto(v1::KeyNamespace proto) {
  switch (proto) {
    case v1::KEY_NAMESPACE_PREFIX:
      return KeyNamespace::kPrefix;
    case v1::KEY_NAMESPACE_POSITION_INDEPENDENT:
      return KeyNamespace::kPositionIndependent;
    default:
      return BadEnum("key namespace", proto);
  }
}

v1::KeyNamespace ToProto(KeyNamespace ns) {
  return ns == KeyNamespace::kPrefix ? v1::KEY_NAMESPACE_PREFIX
                                     : v1::KEY_NAMESPACE_POSITION_INDEPENDENT;
}

absl::StatusOr<ChunkKey> FromProto(const v1::ChunkKey& proto) {
  return ChunkKeyFromFields(proto.algorithm(), proto.namespace_(), proto.layout_fingerprint(),
                            proto.digest());
}

absl::StatusOr<ChunkKey> ChunkKeyFromFields(int algorithm, int key_namespace,
                                            uint64_t layout_fingerprint, std::string_view digest) {
  absl::StatusOr<HashAlgorithm> parsed = FromProto(static_cast<v1::HashAlgorithm>(algorithm));
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<KeyNamespace> ns = FromProto(static_cast<v1::KeyNamespace>(key_namespace));
  if (!ns.ok()) return ns.status();
  if (digest.size() != DigestSizeBytes(*parsed)) {
    return absl::InvalidArgumentError(fmt::format("chunk key digest is {} bytes; {} needs {}",
                                                  digest.size(), HashAlgorithmName(*parsed),
                                                  DigestSizeBytes(*parsed)));
  }
  return ChunkKey::FromParts(*parsed, *ns, layout_fingerprint,
                             {reinterpret_cast<const uint8_t*>(digest.data()), digest.size()});
}

v1::ChunkKey ToProto(const ChunkKey& key) {
  v1::ChunkKey proto;
  ToProto(key, &proto);
  return proto;
}

void ToProto(const ChunkKey& key, v1::ChunkKey* out) {
  out->set_algorithm(ToProto(key.algorithm()));
  out->set_namespace_(ToProto(key.key_namespace()));
  out->set_layout_fingerprint(key.layout_fingerprint());
  out->set_digest(key.digest().data(), key.digest().size());
}

absl::StatusOr<std::vector<ChunkKey>> FromProto(const v1::KeyChain& proto, size_t max_keys) {
  const std::string& digests = proto.digests();
  if (digests.empty()) return std::vector<ChunkKey>();
  absl::StatusOr<HashAlgorithm> algorithm = FromProto(proto.algorithm());
  if (!algorithm.ok()) return algorithm.status();
  absl::StatusOr<KeyNamespace> ns = FromProto(proto.namespace_());
  if (!ns.ok()) return ns.status();
  const size_t digest_size = DigestSizeBytes(*algorithm);
  if (digests.size() % digest_size != 0) {
    return absl::InvalidArgumentError(
        fmt::format("key chain of {} digest bytes is not a whole number of {}-byte {} digests",
                    digests.size(), digest_size, HashAlgorithmName(*algorithm)));
  }
  const size_t count = digests.size() / digest_size;
  if (count > max_keys) {
    return absl::InvalidArgumentError(
        fmt::format("key chain of {} keys; the limit is {}", count, max_keys));
  }
  std::vector<ChunkKey> keys;
  keys.reserve(count);
  const auto* bytes = reinterpret_cast<const uint8_t*>(digests.data());
  for (size_t i = 0; i < count; ++i) {
    keys.push_back(ChunkKey::FromParts(*algorithm, *ns, proto.layout_fingerprint(),
                                       {bytes + i * digest_size, digest_size}));
  }
  return keys;
}

absl::Status ToProto(std::span<const ChunkKey> chain, v1::KeyChain& proto) {
  proto.Clear();
  if (chain.empty()) return absl::OkStatus();
  const ChunkKey& first = chain.front();
  proto.set_algorithm(ToProto(first.algorithm()));
  proto.set_namespace_(ToProto(first.key_namespace()));
  proto.set_layout_fingerprint(first.layout_fingerprint());
  std::string* digests = proto.mutable_digests();
  digests->reserve(chain.size() * first.digest().size());
  for (const ChunkKey& key : chain) {
    if (key.empty() || key.algorithm() != first.algorithm() ||
        key.key_namespace() != first.key_namespace() ||
        key.layout_fingerprint() != first.layout_fingerprint()) {
      proto.Clear();
      return absl::InvalidArgumentError(fmt::format(
          "key {} cannot share a chain with {} (algorithm, namespace and layout must match)",
          key.ToString(), first.ToString()));
    }
    digests->append(reinterpret_cast<const char*>(key.digest().data()), key.digest().size());
  }
  return absl::OkStatus();
}

absl::Status FromProto(const v1::Status& proto) {
  if (proto.code() == 0) return absl::OkStatus();
  if (proto.code() < 0 || proto.code() > 16) {
    return absl::InternalError(
        fmt::format("unknown status code {}: {}", proto.code(), proto.message()));
  }
  return absl::Status(static_cast<absl::StatusCode>(proto.code()), proto.message());
}

v1::Status ToProto(const absl::Status& status) {
  v1::Status proto;
  proto.set_code(static_cast<int32_t>(status.code()));
  proto.set_message(ToStdString(status.message()));
  return proto;
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), ToStdString(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace strata
