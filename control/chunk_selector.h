// Resolves the chunk selections of control requests (a token chain with its layout, or keys)
// into chunk keys, with the cluster's key protocol: the daemon and the controller answer the
// same selections. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/key_hasher.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "strata/v1/control.pb.h"

namespace strata::control {

struct SelectionLimits {
  uint32_t max_tokens = 4u << 20;
  uint32_t max_keys = 65536;
};

struct ResolvedChunks {
  std::vector<ChunkKey> keys;
  // Token chains: the tokens each key covers (the last chunk may be partial). Empty for keys.
  std::vector<uint32_t> chunk_tokens;
  bool by_tokens = false;
};

// A selection spelled as separate fields (LookupRequest's form). `layout` is nullable.
// kInvalidArgument for none or both of tokens and keys, tokens without a layout, an invalid
// layout, a malformed key, or more tokens or keys than `limits` allow.
absl::StatusOr<ResolvedChunks> ResolveChunks(
    const v1::KvLayout* layout, std::span<const uint32_t> tokens, const KeyExtras& extras,
    const google::protobuf::RepeatedPtrField<v1::ChunkKey>& keys,
    const KeyHasherOptions& key_options, const SelectionLimits& limits);

// The same with the keys decoded already (Lookup decodes them from the wire).
absl::StatusOr<ResolvedChunks> ResolveChunks(const v1::KvLayout* layout,
                                             std::span<const uint32_t> tokens,
                                             const KeyExtras& extras, std::vector<ChunkKey> keys,
                                             const KeyHasherOptions& key_options,
                                             const SelectionLimits& limits);

// The same for a ChunkSelector.
absl::StatusOr<ResolvedChunks> ResolveSelector(const v1::ChunkSelector& selector,
                                               const KeyHasherOptions& key_options,
                                               const SelectionLimits& limits);

}  // namespace strata::control
