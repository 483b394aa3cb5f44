#include "core/kv_layout.h"

#define XXH_INLINE_ALL  // inlined XXH3: no call overhead on the hashing hot paths
#include <xxhash.h>

#include "fmt/format.h"

namespace strata {
namespace {

constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxHeads = 4096;
constexpr uint32_t kMaxHeadDim = 8192;
constexpr uint32_t kMaxChunkTokens = 1u << 20;
constexpr uint64_t kMaxChunkBytes = uint64_t{4} << 30;
constexpr size_t kMaxModelIdBytes = 512;

void AppendU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t DtypeSizeBytes(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFloat16:
    case KvDtype::kBfloat16:
      return 2;
    case KvDtype::kFloat32:
      return 4;
    case KvDtype::kFp8E4m3:
    case KvDtype::kInt8:
      return 1;
  }
  return 0;
}

const char* DtypeName(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kFloat16:
      return "fp16";
    case KvDtype::kBfloat16:
      return "bf16";
    case KvDtype::kFloat32:
      return "fp32";
    case KvDtype::kFp8E4m3:
      return "fp8_e4m3";
    case KvDtype::kInt8:
      return "int8";
  }
  return "unknown";
}

absl::Status KvLayout::Validate() const {
  auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(fmt::format("invalid KvLayout: {}", what));
  };
  if (model_id.empty()) return bad("model_id is empty");
  if (model_id.size() > kMaxModelIdBytes)
    return bad(fmt::format("model_id longer than {} bytes", kMaxModelIdBytes));
  if (kind != KvKind::kMha && kind != KvKind::kMlaLatent) return bad("unknown kind");
  if (DtypeSizeBytes(dtype) == 0) return bad("unknown dtype");
  if (positional != PositionalFormat::kRopeApplied && positional != PositionalFormat::kNope) {
    return bad("unknown positional format");
  }
  if (num_layers == 0 || num_layers > kMaxLayers)
    return bad(fmt::format("num_layers={}", num_layers));
  if (num_kv_heads == 0 || num_kv_heads > kMaxHeads)
    return bad(fmt::format("num_kv_heads={}", num_kv_heads));
  if (head_dim == 0 || head_dim > kMaxHeadDim) return bad(fmt::format("head_dim={}", head_dim));
  if (tp_world_size == 0 || tp_rank >= tp_world_size) {
    return bad(fmt::format("tp_rank={} outside tp_world_size={}", tp_rank, tp_world_size));
  }
  if (chunk_tokens == 0 || chunk_tokens > kMaxChunkTokens) {
    return bad(fmt::format("chunk_tokens={}", chunk_tokens));
  }
  if (chunk_bytes(chunk_tokens) > kMaxChunkBytes) {
    return bad(fmt::format("a chunk of {} tokens is {} bytes, above the 4 GiB limit", chunk_tokens,
                           chunk_bytes(chunk_tokens)));
  }
  return absl::OkStatus();
}

uint64_t KvLayout::Fingerprint() const {
  std::string canonical = "strata.kv_layout";
  AppendU32(canonical, kFormatVersion);
  AppendU32(canonical, static_cast<uint32_t>(model_id.size()));
  canonical += model_id;
  for (uint32_t field : {static_cast<uint32_t>(kind), num_layers, num_kv_heads, head_dim,
                         static_cast<uint32_t>(dtype), tp_rank, tp_world_size,
                         static_cast<uint32_t>(positional), chunk_tokens}) {
    AppendU32(canonical, field);
  }
  return XXH3_64bits(canonical.data(), canonical.size());
}

std::string KvLayout::DebugString() const {
  return fmt::format(
      "model={} kind={} layers={} kv_heads={} head_dim={} dtype={} tp={}/{} pos={} chunk={}",
      model_id, kind == KvKind::kMha ? "mha" : "mla", num_layers, num_kv_heads, head_dim,
      DtypeName(dtype), tp_rank, tp_world_size,
      positional == PositionalFormat::kRopeApplied ? "rope" : "nope", chunk_tokens);
}

}  // namespace strata
