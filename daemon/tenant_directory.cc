#include "daemon/tenant_directory.h"

namespace strata::daemon {

TenantDirectory::TenantDirectory(const std::map<std::string, uint64_t>& quotas) {
  uint32_t next_id = 1;
  for (const auto& [tenant, bytes] : quotas) {
    ids_.emplace(tenant, next_id);
    quotas_.push_back({.tenant = next_id, .bytes = bytes});
    ++next_id;
  }
}

uint32_t TenantDirectory::IdOf(std::string_view tenant) const {
  if (tenant.empty()) return 0;
  auto it = ids_.find(absl::string_view(tenant.data(), tenant.size()));
  return it == ids_.end() ? 0 : it->second;
}

}  // namespace strata::daemon
