#include "control/chunk_selector.h"

#include <algorithm>

#include "fmt/format.h"
#include "proto/convert.h"

namespace strata::control {

absl::StatusOr<ResolvedChunks> ResolveChunks(
    const v1::KvLayout* layout, std::span<const uint32_t> tokens, const KeyExtras& extras,
    const google::protobuf::RepeatedPtrField<v1::ChunkKey>& keys,
    const KeyHasherOptions& key_options, const SelectionLimits& limits) {
  if (static_cast<uint32_t>(keys.size()) > limits.max_keys) {
    return absl::InvalidArgumentError(
        fmt::format("{} keys; the limit is {}", keys.size(), limits.max_keys));
  }
  std::vector<ChunkKey> decoded;
  decoded.reserve(keys.size());
  for (const v1::ChunkKey& proto : keys) {
    absl::StatusOr<ChunkKey> key = FromProto(proto);
    if (!key.ok()) return key.status();
    decoded.push_back(*key);
  }
  return ResolveChunks(layout, tokens, extras, std::move(decoded), key_options, limits);
}

absl::StatusOr<ResolvedChunks> ResolveChunks(const v1::KvLayout* layout,
                                             std::span<const uint32_t> tokens,
                                             const KeyExtras& extras, std::vector<ChunkKey> keys,
                                             const KeyHasherOptions& key_options,
                                             const SelectionLimits& limits) {
  ResolvedChunks resolved;
  resolved.by_tokens = !tokens.empty();
  if (resolved.by_tokens == !keys.empty()) {
    return absl::InvalidArgumentError("select chunks by either tokens (with a layout) or keys");
  }
  if (resolved.by_tokens) {
    if (tokens.size() > limits.max_tokens) {
      return absl::InvalidArgumentError(
          fmt::format("{} tokens; the limit is {}", tokens.size(), limits.max_tokens));
    }
    if (layout == nullptr) return absl::InvalidArgumentError("a token selection needs a layout");
    absl::StatusOr<KvLayout> parsed = FromProto(*layout);
    if (!parsed.ok()) return parsed.status();
    absl::StatusOr<KeyHasher> hasher = KeyHasher::Create(*parsed, key_options);
    if (!hasher.ok()) return hasher.status();
    resolved.keys = hasher->PrefixKeys(tokens, extras, PartialChunk::kInclude);
    for (size_t i = 0; i < resolved.keys.size(); ++i) {
      resolved.chunk_tokens.push_back(static_cast<uint32_t>(
          std::min<size_t>(parsed->chunk_tokens, tokens.size() - i * parsed->chunk_tokens)));
    }
    return resolved;
  }
  if (keys.size() > limits.max_keys) {
    return absl::InvalidArgumentError(
        fmt::format("{} keys; the limit is {}", keys.size(), limits.max_keys));
  }
  resolved.keys = std::move(keys);
  return resolved;
}

absl::StatusOr<ResolvedChunks> ResolveSelector(const v1::ChunkSelector& selector,
                                               const KeyHasherOptions& key_options,
                                               const SelectionLimits& limits) {
  return ResolveChunks(selector.has_layout() ? &selector.layout() : nullptr,
                       {selector.tokens().data(), static_cast<size_t>(selector.tokens_size())},
                       {.tenant_salt = selector.tenant_salt(), .lora_name = selector.lora_name()},
                       selector.keys(), key_options, limits);
}

}  // namespace strata::control
