#include "storage/policy/tenant_quota_policy.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "fmt/format.h"

namespace strata::storage {

TenantQuotaPolicy::TenantQuotaPolicy(std::string inner_policy, const PolicyOptions& options)
    : inner_policy_(std::move(inner_policy)),
      name_(fmt::format("{}+tenant-quotas", inner_policy_)),
      capacity_(options.capacity_bytes) {
  for (const TenantQuota& quota : options.tenant_quotas) quotas_[quota.tenant] = quota.bytes;
}

TenantQuotaPolicy::Tenant& TenantQuotaPolicy::TenantFor(uint32_t tenant) {
  std::unique_ptr<Tenant>& slot = tenants_[tenant];
  if (slot == nullptr) {
    slot = std::make_unique<Tenant>();
    auto quota = quotas_.find(tenant);
    slot->quota = quota == quotas_.end() ? capacity_ : quota->second;
    absl::StatusOr<std::unique_ptr<EvictionPolicy>> policy =
        MakeEvictionPolicy(inner_policy_, {.capacity_bytes = slot->quota});
    STRATA_CHECK_MSG(policy.ok(), "inner eviction policy was validated at construction");
    slot->policy = *std::move(policy);
  }
  return *slot;
}

void TenantQuotaPolicy::OnInsert(const PolicyChunkInfo& info) {
  auto [it, inserted] = owners_.try_emplace(info.id);
  if (!inserted) return;
  Tenant& tenant = TenantFor(info.tenant);
  it->second = {.tenant = &tenant, .size_bytes = info.size_bytes};
  tenant.bytes += info.size_bytes;
  PolicyChunkInfo inner = info;
  // A parent stored by another tenant is not in this tenant's policy.
  auto parent = owners_.find(info.parent);
  if (parent == owners_.end() || parent->second.tenant != &tenant) inner.parent = kNoChunk;
  tenant.policy->OnInsert(inner);
}

void TenantQuotaPolicy::OnAccess(ChunkId id) {
  auto it = owners_.find(id);
  if (it != owners_.end()) it->second.tenant->policy->OnAccess(id);
}

void TenantQuotaPolicy::OnRemove(ChunkId id) {
  auto it = owners_.find(id);
  if (it == owners_.end()) return;
  it->second.tenant->policy->OnRemove(id);
  Forget(it);
}

void TenantQuotaPolicy::SetEvictable(ChunkId id, bool evictable) {
  auto it = owners_.find(id);
  if (it != owners_.end()) it->second.tenant->policy->SetEvictable(id, evictable);
}

std::optional<ChunkId> TenantQuotaPolicy::PopVictim() {
  std::vector<Tenant*> order;
  order.reserve(tenants_.size());
  for (auto& [id, tenant] : tenants_) {
    if (tenant->bytes > 0) order.push_back(tenant.get());
  }
  // Largest bytes / quota first, compared without division.
  std::sort(order.begin(), order.end(), [](const Tenant* a, const Tenant* b) {
    return static_cast<unsigned __int128>(a->bytes) * b->quota >
           static_cast<unsigned __int128>(b->bytes) * a->quota;
  });
  for (Tenant* tenant : order) {
    const std::optional<ChunkId> victim = tenant->policy->PopVictim();
    if (!victim.has_value()) continue;
    Forget(owners_.find(*victim));
    return victim;
  }
  return std::nullopt;
}

uint64_t TenantQuotaPolicy::tenant_bytes(uint32_t tenant) const {
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second->bytes;
}

void TenantQuotaPolicy::Forget(absl::flat_hash_map<ChunkId, Owner>::iterator it) {
  it->second.tenant->bytes -= it->second.size_bytes;
  owners_.erase(it);
}

}  // namespace strata::storage
