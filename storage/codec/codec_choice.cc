#include "storage/codec/codec_choice.h"

#include "core/status_macros.h"
#include "fmt/format.h"
#include "storage/codec/codec_registry.h"

namespace strata::storage {

absl::StatusOr<const Codec*> FindTierCodec(std::string_view name) {
  STRATA_ASSIGN_OR_RETURN(const Codec* codec, CodecRegistry::Find(name));
  if (codec->drops_tokens()) {
    return absl::InvalidArgumentError(fmt::format(
        "codec {} drops tokens, and a tier keeps only chunks its loads can restore whole",
        codec->name()));
  }
  return codec;
}

const CodecChoice& TenantCodecs::For(std::string_view tenant) const {
  if (tenant.empty()) return fallback;
  auto it = tenants.find(tenant);
  return it == tenants.end() ? fallback : it->second;
}

bool TenantCodecs::any() const {
  if (fallback.codec != nullptr) return true;
  for (const auto& [tenant, choice] : tenants) {
    if (choice.codec != nullptr) return true;
  }
  return false;
}

}  // namespace strata::storage
