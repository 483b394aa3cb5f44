#include "storage/policy/eviction_policy.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "fmt/format.h"
#include "storage/policy/adaptive_policy.h"
#include "storage/policy/arc_policy.h"
#include "storage/policy/lru_policy.h"
#include "storage/policy/prefix_lru_policy.h"
#include "storage/policy/s3fifo_policy.h"
#include "storage/policy/tenant_quota_policy.h"

namespace strata::storage {
namespace {

// Builds one unpartitioned policy; the name is known.
std::unique_ptr<EvictionPolicy> MakeKnownPolicy(std::string_view name, uint64_t capacity_bytes) {
  if (name == "adaptive") return std::make_unique<AdaptivePolicy>(capacity_bytes);
  if (name == "arc") return std::make_unique<ArcPolicy>(capacity_bytes);
  if (name == "s3fifo") return std::make_unique<S3FifoPolicy>(capacity_bytes);
  if (name == "prefix-lru") return std::make_unique<PrefixLruPolicy>();
  return std::make_unique<LruPolicy>();
}

bool NeedsCapacity(std::string_view name) { return name != "lru" && name != "prefix-lru"; }

absl::Status ValidateQuotas(const PolicyOptions& options) {
  absl::flat_hash_set<uint32_t> seen;
  for (const TenantQuota& quota : options.tenant_quotas) {
    if (quota.bytes == 0) {
      return absl::InvalidArgumentError(fmt::format("tenant {} has a quota of 0", quota.tenant));
    }
    if (!seen.insert(quota.tenant).second) {
      return absl::InvalidArgumentError(fmt::format("tenant {} has two quotas", quota.tenant));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string_view> EvictionPolicyNames() {
  return {kDefaultEvictionPolicy, "lru", "arc", "s3fifo", "prefix-lru"};
}

absl::StatusOr<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                                   const PolicyOptions& options) {
  const std::vector<std::string_view> names = EvictionPolicyNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    return absl::InvalidArgumentError(
        fmt::format("unknown eviction policy '{}' (known: {})", name, fmt::join(names, ", ")));
  }
  if (NeedsCapacity(name) && options.capacity_bytes == 0) {
    return absl::InvalidArgumentError(
        fmt::format("eviction policy '{}' needs the tier's capacity", name));
  }
  if (options.tenant_quotas.empty()) return MakeKnownPolicy(name, options.capacity_bytes);
  if (absl::Status status = ValidateQuotas(options); !status.ok()) return status;
  return std::make_unique<TenantQuotaPolicy>(std::string(name), options);
}

}  // namespace strata::storage
