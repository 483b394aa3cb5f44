// What a tier's configuration says to encode chunks with: a codec and its parameters
// (CodecChoice), one for every chunk and others for the chunks of named tenants
// (TenantCodecs: [disk] codec with [disk.tenant_codecs], [host] codec with
// [host.tenant_codecs]). Plain values; the codecs are the registry's (never owned).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "storage/codec/codec.h"

namespace strata::storage {

// The codec named `name` (CodecRegistry::Find's errors) that a tier may keep chunks in: one whose
// decode restores every token. A token-dropping codec (Codec::drops_tokens) is kInvalidArgument.
absl::StatusOr<const Codec*> FindTierCodec(std::string_view name);

// Encoded by `codec` with `params`; no codec: kept as they are.
struct CodecChoice {
  const Codec* codec = nullptr;  // from CodecRegistry; not owned
  CodecParams params;
};

// A chunk stored under a tenant named in `tenants` by that tenant's choice, every other chunk
// (no tenant, or one not named) by `fallback`.
struct TenantCodecs {
  CodecChoice fallback;
  std::map<std::string, CodecChoice, std::less<>> tenants;

  // The choice for a chunk stored under `tenant` ("" for none).
  const CodecChoice& For(std::string_view tenant) const;
  // Whether any chunk is encoded.
  bool any() const;
};

}  // namespace strata::storage
