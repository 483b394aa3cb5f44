#include "bench/route/instance_cache.h"

namespace strata::bench {

std::optional<uint64_t> LruBlocks::Touch(uint64_t block) {
  if (capacity_ == 0) return block;
  if (auto it = index_.find(block); it != index_.end()) {
    order_.splice(order_.begin(), order_, it->second);
    return std::nullopt;
  }
  order_.push_front(block);
  index_.emplace(block, order_.begin());
  if (order_.size() <= capacity_) return std::nullopt;
  const uint64_t evicted = order_.back();
  order_.pop_back();
  index_.erase(evicted);
  return evicted;
}

std::vector<controller::Tier> InstanceCache::CachedPrefix(std::span<const uint64_t> blocks) const {
  std::vector<controller::Tier> tiers;
  for (uint64_t block : blocks) {
    if (host_.Contains(block)) {
      tiers.push_back(controller::Tier::kHost);
    } else if (disk_.Contains(block)) {
      tiers.push_back(controller::Tier::kDisk);
    } else {
      break;
    }
  }
  return tiers;
}

void InstanceCache::Store(std::span<const uint64_t> blocks) {
  for (uint64_t block : blocks) {
    if (std::optional<uint64_t> evicted = host_.Touch(block)) disk_.Touch(*evicted);
  }
}

}  // namespace strata::bench
