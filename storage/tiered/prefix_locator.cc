#include "storage/tiered/prefix_locator.h"

namespace strata::storage {

bool HeldBelow(const LowerTier* below, const Demoter* staged, const ChunkKey& key) {
  return below != nullptr && (below->Contains(key) || (staged != nullptr && staged->IsStaged(key)));
}

std::vector<Tier> LocatePrefix(const HostTier& host, const LowerTier* disk,
                               std::span<const ChunkKey> chain, const Demoter* staged) {
  std::vector<Tier> tiers(host.Lookup(chain), Tier::kHost);
  while (disk != nullptr && tiers.size() < chain.size()) {
    const ChunkKey& key = chain[tiers.size()];
    if (host.Contains(key)) {
      tiers.push_back(Tier::kHost);
    } else if (HeldBelow(disk, staged, key)) {
      tiers.push_back(Tier::kDisk);
    } else {
      break;
    }
  }
  return tiers;
}

}  // namespace strata::storage
