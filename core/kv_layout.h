// KvLayout describes what a chunk of KV holds: which model, which TP shard, its geometry and
// dtype, and how positions are encoded. Its fingerprint is part of every chunk key, so chunks of
// two models, dtypes or TP ranks never collide. A plain value type; thread-compatible.
//
// The byte layout of a chunk in every tier is layer-major:
//   [layer][K|V][token][kv_head][head_dim]     (MHA: two planes per layer)
//   [layer][latent][token][kv_head][head_dim]  (MLA: one plane per layer)
// so one layer of a chunk is contiguous and can be copied while the previous one is consumed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata {

enum class KvKind : uint8_t {
  kMha = 1,        // separate K and V planes per layer (MHA, GQA, MQA)
  kMlaLatent = 2,  // one compressed latent plane per layer (DeepSeek MLA)
};

enum class KvDtype : uint8_t {
  kFloat16 = 1,
  kBfloat16 = 2,
  kFloat32 = 3,
  kFp8E4m3 = 4,
  kInt8 = 5,
};

enum class PositionalFormat : uint8_t {
  kRopeApplied = 1,  // K stored after RoPE at its absolute position (prefix chunks)
  kNope = 2,         // K stored before RoPE; attention rotates on the fly (MEPIC PIC chunks)
};

// Size of one element of `dtype` in bytes.
uint32_t DtypeSizeBytes(KvDtype dtype);

// The one mapping between these enums and their names, for every front end that takes names
// (the CLI's flags, the Python binding). Canonical names, which the Name functions return:
//   KvKind            mha | mla
//   KvDtype           fp16 | bf16 | fp32 | fp8_e4m3 | int8
//   PositionalFormat  rope | nope
// The Parse functions match case-insensitively and also take these aliases:
//   mha       gqa, mqa (the same two-plane layout)
//   mla       mla_latent
//   fp16      float16, half, torch.float16, torch.half
//   bf16      bfloat16, torch.bfloat16
//   fp32      float32, float, torch.float32, torch.float
//   fp8_e4m3  fp8 (vLLM's cache_dtype), float8_e4m3fn, torch.float8_e4m3fn
//   int8      torch.int8
//   rope      rope_applied
// An unknown name is kInvalidArgument naming every accepted value.
const char* KvKindName(KvKind kind);
const char* DtypeName(KvDtype dtype);
const char* PositionalFormatName(PositionalFormat positional);
absl::StatusOr<KvKind> ParseKvKind(std::string_view name);
absl::StatusOr<KvDtype> ParseKvDtype(std::string_view name);
absl::StatusOr<PositionalFormat> ParsePositionalFormat(std::string_view name);

// The enums from their numeric values (the C ABI's strata_kv_kind, strata_dtype and
// strata_positional are these values); kInvalidArgument for a value that names no enumerator.
absl::StatusOr<KvKind> KvKindFromValue(uint32_t value);
absl::StatusOr<KvDtype> KvDtypeFromValue(uint32_t value);
absl::StatusOr<PositionalFormat> PositionalFormatFromValue(uint32_t value);

struct KvLayout {
  // Bumped whenever the fingerprint's inputs or the chunk byte layout change.
  static constexpr uint32_t kFormatVersion = 1;
  static constexpr uint32_t kDefaultChunkTokens = 256;

  std::string model_id;
  KvKind kind = KvKind::kMha;
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;  // of this TP rank
  uint32_t head_dim = 0;
  KvDtype dtype = KvDtype::kBfloat16;
  uint32_t tp_rank = 0;
  uint32_t tp_world_size = 1;
  PositionalFormat positional = PositionalFormat::kRopeApplied;
  uint32_t chunk_tokens = kDefaultChunkTokens;

  // kInvalidArgument naming the offending field when the layout is unusable: empty model id,
  // zero or absurd dimensions, tp_rank outside [0, tp_world_size), a chunk above 4 GiB, ...
  absl::Status Validate() const;

  // Planes per layer: 2 (K and V) for MHA, 1 for an MLA latent.
  uint32_t planes_per_layer() const { return kind == KvKind::kMha ? 2 : 1; }
  // Bytes of one token of one plane of one layer.
  uint64_t plane_token_bytes() const {
    return uint64_t{num_kv_heads} * head_dim * DtypeSizeBytes(dtype);
  }
  // Bytes one token occupies across all layers and planes.
  uint64_t bytes_per_token() const { return plane_token_bytes() * planes_per_layer() * num_layers; }
  // Bytes of a chunk holding `num_tokens` tokens (a partial last chunk holds fewer).
  uint64_t chunk_bytes(uint32_t num_tokens) const { return bytes_per_token() * num_tokens; }
  // Bytes of one layer of a chunk holding `num_tokens` tokens.
  uint64_t layer_bytes(uint32_t num_tokens) const {
    return plane_token_bytes() * planes_per_layer() * num_tokens;
  }
  // Offset of plane `plane` of layer `layer` inside a chunk holding `num_tokens` tokens.
  uint64_t plane_offset(uint32_t layer, uint32_t plane, uint32_t num_tokens) const {
    return layer_bytes(num_tokens) * layer + plane_token_bytes() * num_tokens * plane;
  }

  // A 64-bit fingerprint of every field and kFormatVersion: equal layouts give equal
  // fingerprints in every process and on every run; any field change gives a different one.
  // It is the xxh3-64 of Encode().
  uint64_t Fingerprint() const;

  // Every field and kFormatVersion as bytes, the same in every process and on every run (what a
  // tier that outlives the process keeps, e.g. to decode its encoded chunks after a restart).
  std::string Encode() const;
  // Encode's bytes back; kInvalidArgument for bytes that are not an encoded layout of this
  // format version, or one that fails Validate.
  static absl::StatusOr<KvLayout> Decode(std::string_view bytes);

  // "model=... kind=mha layers=32 kv_heads=8 head_dim=128 dtype=bf16 tp=0/1 pos=rope chunk=256"
  std::string DebugString() const;

  friend bool operator==(const KvLayout&, const KvLayout&) = default;
};

}  // namespace strata
