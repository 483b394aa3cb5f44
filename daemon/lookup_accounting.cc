#include "daemon/lookup_accounting.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/string_view.h"

namespace strata::daemon {

std::string_view LookupSourceName(LookupSource source) {
  return source == LookupSource::kEngine ? "engine" : "control";
}

uint64_t LookupTally::hit_tokens_total() const {
  return std::accumulate(hit_tokens.begin(), hit_tokens.end(), uint64_t{0});
}

LookupTally& LookupTally::operator+=(const LookupTally& other) {
  lookups += other.lookups;
  for (size_t t = 0; t < hit_tokens.size(); ++t) hit_tokens[t] += other.hit_tokens[t];
  miss_tokens += other.miss_tokens;
  return *this;
}

std::array<uint64_t, storage::kTierCount> HitTokensByTier(
    std::span<const storage::Tier> tiers, absl::FunctionRef<uint64_t(size_t)> tokens_of) {
  std::array<uint64_t, storage::kTierCount> hit{};
  for (size_t i = 0; i < tiers.size(); ++i) hit[static_cast<size_t>(tiers[i])] += tokens_of(i);
  return hit;
}

void LookupAccounting::Record(LookupSource source, std::string_view tenant,
                              const std::array<uint64_t, storage::kTierCount>& hit_tokens,
                              uint64_t miss_tokens) {
  LookupTally one{.lookups = 1, .hit_tokens = hit_tokens, .miss_tokens = miss_tokens};
  absl::MutexLock lock(&mu_);
  auto& tenants = tenants_[static_cast<size_t>(source)];
  auto it = tenants.find(absl::string_view(tenant.data(), tenant.size()));
  if (it == tenants.end()) {
    const bool named = tenants.size() < kMaxNamedTenants;
    it = tenants.try_emplace(std::string(named ? tenant : kOtherTenants)).first;
  }
  it->second += one;
}

LookupTally LookupAccounting::Total(LookupSource source) const {
  LookupTally total;
  absl::MutexLock lock(&mu_);
  for (const auto& [tenant, tally] : tenants_[static_cast<size_t>(source)]) total += tally;
  return total;
}

std::vector<std::pair<std::string, LookupTally>> LookupAccounting::ByTenant(
    LookupSource source) const {
  std::vector<std::pair<std::string, LookupTally>> rows;
  {
    absl::MutexLock lock(&mu_);
    const auto& tenants = tenants_[static_cast<size_t>(source)];
    rows.assign(tenants.begin(), tenants.end());
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return rows;
}

}  // namespace strata::daemon
