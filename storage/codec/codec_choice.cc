#include "storage/codec/codec_choice.h"

namespace strata::storage {

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
