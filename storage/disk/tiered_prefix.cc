#include "storage/disk/tiered_prefix.h"

namespace strata::storage {

std::vector<PrefixTier> LocatePrefix(const HostTier& host, const DiskTier* disk,
                                     std::span<const ChunkKey> chain, const DiskMover* staged) {
  std::vector<PrefixTier> tiers(host.Lookup(chain), PrefixTier::kHost);
  while (disk != nullptr && tiers.size() < chain.size()) {
    const ChunkKey& key = chain[tiers.size()];
    if (host.Contains(key)) {
      tiers.push_back(PrefixTier::kHost);
    } else if (disk->Contains(key) || (staged != nullptr && staged->IsStaged(key))) {
      tiers.push_back(PrefixTier::kDisk);
    } else {
      break;
    }
  }
  return tiers;
}

}  // namespace strata::storage
