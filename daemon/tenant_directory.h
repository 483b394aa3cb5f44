// TenantDirectory names the tenants that have a host-tier quota ([host.tenant_quotas] in the
// config; a tenant is the tenant salt its engine requests carry, vLLM's cache_salt). Each gets
// a small id, which is what the tier's TenantQuotaPolicy partitions by; every other tenant,
// and requests with no tenant, share id 0, bounded only by the capacity. Immutable.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "storage/policy/eviction_policy.h"

namespace strata::daemon {

class TenantDirectory {
 public:
  TenantDirectory() = default;
  // `quotas`: tenant -> bytes; ids are assigned from 1 in the map's order.
  explicit TenantDirectory(const std::map<std::string, uint64_t>& quotas);

  // The id a store for `tenant` is accounted under: 0 when it has no quota.
  uint32_t IdOf(std::string_view tenant) const;
  // The quotas by id, for HostTierOptions::tenant_quotas.
  const std::vector<storage::TenantQuota>& quotas() const { return quotas_; }

 private:
  absl::flat_hash_map<std::string, uint32_t> ids_;
  std::vector<storage::TenantQuota> quotas_;
};

}  // namespace strata::daemon
