#include "storage/tiered/prefix_locator.h"

namespace strata::storage {

LowerTier* FindBelow(LowerTiers lower, const Demoter* staged, const ChunkKey& key) {
  for (LowerTier* tier : lower) {
    if (tier->Contains(key)) return tier;
    // Staged chunks are on their way to the nearest tier, the first one.
    if (tier == lower.front() && staged != nullptr && staged->IsStaged(key)) return tier;
  }
  return nullptr;
}

std::vector<Tier> LocatePrefix(const HostTier& host, LowerTiers lower,
                               std::span<const ChunkKey> chain, const Demoter* staged) {
  std::vector<Tier> tiers(host.Lookup(chain), Tier::kHost);
  while (!lower.empty() && tiers.size() < chain.size()) {
    const ChunkKey& key = chain[tiers.size()];
    if (host.Contains(key)) {
      tiers.push_back(Tier::kHost);
    } else if (const LowerTier* below = FindBelow(lower, staged, key); below != nullptr) {
      tiers.push_back(below->tier());
    } else {
      break;
    }
  }
  return tiers;
}

}  // namespace strata::storage
