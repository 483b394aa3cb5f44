#include "core/kv_layout.h"

#define XXH_INLINE_ALL  // inlined XXH3: no call overhead on the hashing hot paths
#include <xxhash.h>

#include "absl/strings/ascii.h"
#include "fmt/format.h"

namespace strata {
namespace {

constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxHeads = 4096;
constexpr uint32_t kMaxHeadDim = 8192;
constexpr uint32_t kMaxChunkTokens = 1u << 20;
constexpr uint64_t kMaxChunkBytes = uint64_t{4} << 30;
constexpr size_t kMaxModelIdBytes = 512;

constexpr std::string_view kEncodedLayoutMagic = "strata.kv_layout";

void AppendU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <class E>
struct NamedValue {
  const char* name;  // lower case
  E value;
};

// The one table of names per enum. A value's names are adjacent, its canonical name first.
constexpr NamedValue<KvKind> kKindNames[] = {
    {"mha", KvKind::kMha},
    {"gqa", KvKind::kMha},
    {"mqa", KvKind::kMha},
    {"mla", KvKind::kMlaLatent},
    {"mla_latent", KvKind::kMlaLatent},
};
constexpr NamedValue<KvDtype> kDtypeNames[] = {
    {"fp16", KvDtype::kFloat16},
    {"float16", KvDtype::kFloat16},
    {"half", KvDtype::kFloat16},
    {"torch.float16", KvDtype::kFloat16},
    {"torch.half", KvDtype::kFloat16},
    {"bf16", KvDtype::kBfloat16},
    {"bfloat16", KvDtype::kBfloat16},
    {"torch.bfloat16", KvDtype::kBfloat16},
    {"fp32", KvDtype::kFloat32},
    {"float32", KvDtype::kFloat32},
    {"float", KvDtype::kFloat32},
    {"torch.float32", KvDtype::kFloat32},
    {"torch.float", KvDtype::kFloat32},
    {"fp8_e4m3", KvDtype::kFp8E4m3},
    {"fp8", KvDtype::kFp8E4m3},
    {"float8_e4m3fn", KvDtype::kFp8E4m3},
    {"torch.float8_e4m3fn", KvDtype::kFp8E4m3},
    {"int8", KvDtype::kInt8},
    {"torch.int8", KvDtype::kInt8},
};
constexpr NamedValue<PositionalFormat> kPositionalNames[] = {
    {"rope", PositionalFormat::kRopeApplied},
    {"rope_applied", PositionalFormat::kRopeApplied},
    {"nope", PositionalFormat::kNope},
};

template <class E, size_t N>
const char* NameOf(const NamedValue<E> (&names)[N], E value) {
  for (const NamedValue<E>& entry : names) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

// "fp16 (float16, half), bf16 (bfloat16), int8": each canonical name with its aliases.
template <class E, size_t N>
std::string AcceptedNames(const NamedValue<E> (&names)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    const bool canonical = i == 0 || names[i - 1].value != names[i].value;
    const bool last_of_value = i + 1 == N || names[i + 1].value != names[i].value;
    if (canonical) {
      if (i > 0) out += ", ";
      out += names[i].name;
      if (!last_of_value) out += " (";
    } else {
      out += names[i].name;
      out += last_of_value ? ")" : ", ";
    }
  }
  return out;
}

template <class E, size_t N>
absl::StatusOr<E> ParseName(const NamedValue<E> (&names)[N], std::string_view what,
                            std::string_view name) {
  std::string lower(name);
  absl::AsciiStrToLower(&lower);
  for (const NamedValue<E>& entry : names) {
    if (lower == entry.name) return entry.value;
  }
  return absl::InvalidArgumentError(fmt::format(
      "unknown {} '{}' (accepted, case-insensitively: {})", what, name, AcceptedNames(names)));
}

template <class E, size_t N>
absl::StatusOr<E> FromValue(const NamedValue<E> (&names)[N], std::string_view what,
                            uint32_t value) {
  std::string accepted;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0 && names[i - 1].value == names[i].value) continue;
    if (static_cast<uint32_t>(names[i].value) == value) return names[i].value;
    if (!accepted.empty()) accepted += ", ";
    accepted += fmt::format("{} = {}", static_cast<uint32_t>(names[i].value), names[i].name);
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown {} value {} (accepted: {})", what, value, accepted));
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

const char* KvKindName(KvKind kind) { return NameOf(kKindNames, kind); }
const char* DtypeName(KvDtype dtype) { return NameOf(kDtypeNames, dtype); }
const char* PositionalFormatName(PositionalFormat positional) {
  return NameOf(kPositionalNames, positional);
}

absl::StatusOr<KvKind> ParseKvKind(std::string_view name) {
  return ParseName(kKindNames, "kind", name);
}
absl::StatusOr<KvDtype> ParseKvDtype(std::string_view name) {
  return ParseName(kDtypeNames, "dtype", name);
}
absl::StatusOr<PositionalFormat> ParsePositionalFormat(std::string_view name) {
  return ParseName(kPositionalNames, "positional format", name);
}

absl::StatusOr<KvKind> KvKindFromValue(uint32_t value) {
  return FromValue(kKindNames, "kind", value);
}
absl::StatusOr<KvDtype> KvDtypeFromValue(uint32_t value) {
  return FromValue(kDtypeNames, "dtype", value);
}
absl::StatusOr<PositionalFormat> PositionalFormatFromValue(uint32_t value) {
  return FromValue(kPositionalNames, "positional format", value);
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

std::string KvLayout::Encode() const {
  std::string canonical(kEncodedLayoutMagic);
  AppendU32(canonical, kFormatVersion);
  AppendU32(canonical, static_cast<uint32_t>(model_id.size()));
  canonical += model_id;
  for (uint32_t field : {static_cast<uint32_t>(kind), num_layers, num_kv_heads, head_dim,
                         static_cast<uint32_t>(dtype), tp_rank, tp_world_size,
                         static_cast<uint32_t>(positional), chunk_tokens}) {
    AppendU32(canonical, field);
  }
  return canonical;
}

absl::StatusOr<KvLayout> KvLayout::Decode(std::string_view bytes) {
  const auto bad = [](std::string_view what) {
    return absl::InvalidArgumentError(fmt::format("not an encoded KvLayout: {}", what));
  };
  if (!bytes.starts_with(kEncodedLayoutMagic)) return bad("magic");
  bytes.remove_prefix(kEncodedLayoutMagic.size());
  const auto read_u32 = [&bytes](uint32_t& v) {
    if (bytes.size() < 4) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
    bytes.remove_prefix(4);
    return true;
  };
  uint32_t version = 0, model_bytes = 0;
  if (!read_u32(version) || version != kFormatVersion) return bad("format version");
  if (!read_u32(model_bytes) || model_bytes > bytes.size()) return bad("model id");
  KvLayout layout;
  layout.model_id = std::string(bytes.substr(0, model_bytes));
  bytes.remove_prefix(model_bytes);
  uint32_t kind = 0, dtype = 0, positional = 0;
  for (uint32_t* field :
       {&kind, &layout.num_layers, &layout.num_kv_heads, &layout.head_dim, &dtype, &layout.tp_rank,
        &layout.tp_world_size, &positional, &layout.chunk_tokens}) {
    if (!read_u32(*field)) return bad("truncated");
  }
  if (!bytes.empty()) return bad("trailing bytes");
  layout.kind = static_cast<KvKind>(kind);
  layout.dtype = static_cast<KvDtype>(dtype);
  layout.positional = static_cast<PositionalFormat>(positional);
  if (absl::Status valid = layout.Validate(); !valid.ok()) return valid;
  return layout;
}

uint64_t KvLayout::Fingerprint() const {
  const std::string canonical = Encode();
  return XXH3_64bits(canonical.data(), canonical.size());
}

std::string KvLayout::DebugString() const {
  return fmt::format(
      "model={} kind={} layers={} kv_heads={} head_dim={} dtype={} tp={}/{} pos={} chunk={}",
      model_id, KvKindName(kind), num_layers, num_kv_heads, head_dim, DtypeName(dtype), tp_rank,
      tp_world_size, PositionalFormatName(positional), chunk_tokens);
}

}  // namespace strata
