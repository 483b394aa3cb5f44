// TenantQuotaPolicy bounds each tenant's share of a tier. It keeps one inner policy per tenant
// and, when the tier needs space, takes the victim from the tenant that is furthest above its
// quota (largest bytes / quota); a tenant with no evictable chunk is skipped. So a tenant may
// borrow free space while the tier is not full (the cache stays work-conserving), but once it
// is full, a tenant above its quota loses its own chunks first and the others keep theirs.
// Tenants without a quota are bounded by the capacity. PopVictim is O(tenants log tenants);
// the other operations are O(1). Not thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "storage/policy/eviction_policy.h"

namespace strata::storage {

class TenantQuotaPolicy final : public EvictionPolicy {
 public:
  // Builds tenants' inner policies with `inner_policy` (a MakeEvictionPolicy name, validated
  // by the caller) sized to their quota.
  TenantQuotaPolicy(std::string inner_policy, const PolicyOptions& options);

  std::string_view name() const override { return name_; }
  void OnInsert(const PolicyChunkInfo& info) override;
  void OnAccess(ChunkId id) override;
  void OnRemove(ChunkId id) override;
  void SetEvictable(ChunkId id, bool evictable) override;
  std::optional<ChunkId> PopVictim() override;
  size_t size() const override { return owners_.size(); }

  // Bytes resident for `tenant` (for tests and stats).
  uint64_t tenant_bytes(uint32_t tenant) const;

 private:
  struct Tenant {
    uint64_t quota = 0;
    uint64_t bytes = 0;
    std::unique_ptr<EvictionPolicy> policy;
  };
  struct Owner {
    Tenant* tenant = nullptr;
    uint64_t size_bytes = 0;
  };

  Tenant& TenantFor(uint32_t tenant);
  void Forget(absl::flat_hash_map<ChunkId, Owner>::iterator it);

  const std::string inner_policy_;
  const std::string name_;
  const uint64_t capacity_;
  absl::flat_hash_map<uint32_t, uint64_t> quotas_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<Tenant>> tenants_;
  absl::flat_hash_map<ChunkId, Owner> owners_;
};

}  // namespace strata::storage
