#include "storage/tiered/prefix_locator.h"

namespace strata::storage {

bool HeldBy(LowerTiers lower, const Demoter* staged, const LowerTier& tier, const ChunkKey& key) {
  // Staged chunks are on their way to the nearest tier, the first one. Asked before the tier:
  // the demoter unstages a chunk only once the tier shows it, so a chunk whose write ends between
  // the two questions is found by the second (asked the other way round, it was in neither).
  if (&tier == lower.front() && staged != nullptr && staged->IsStaged(key)) return true;
  return tier.Contains(key);
}

LowerTier* FindBelow(LowerTiers lower, const Demoter* staged, const ChunkKey& key) {
  for (LowerTier* tier : lower) {
    if (HeldBy(lower, staged, *tier, key)) return tier;
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
