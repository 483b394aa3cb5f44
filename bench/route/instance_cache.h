// InstanceCache: what one simulated instance of `strata-bench route` caches, in trace blocks: a
// host tier and a disk tier, each LRU, host evictions demoted to disk (write-back), disk
// evictions dropped, as a Strata daemon with a host and a disk tier does. Blocks an instance
// computes or loads go into its host tier; a disk copy stays on disk when its block is promoted.
// Single-threaded; a plain value type.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "controller/index/chunk_event.h"

namespace strata::bench {

// A capacity-bounded LRU set of block ids.
class LruBlocks {
 public:
  explicit LruBlocks(uint64_t capacity) : capacity_(capacity) {}
  bool Contains(uint64_t block) const { return index_.contains(block); }
  // Inserts or refreshes `block`; returns the block it evicted, if any.
  std::optional<uint64_t> Touch(uint64_t block);

 private:
  uint64_t capacity_;
  std::list<uint64_t> order_;  // most recent first
  absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> index_;
};

class InstanceCache {
 public:
  InstanceCache(uint64_t host_blocks, uint64_t disk_blocks)
      : host_(host_blocks), disk_(disk_blocks) {}

  // The tiers of the leading blocks of `blocks` this instance holds (host before disk), up to the
  // first it lacks.
  std::vector<controller::Tier> CachedPrefix(std::span<const uint64_t> blocks) const;
  // The instance computed or loaded `blocks`: they go into its host tier.
  void Store(std::span<const uint64_t> blocks);

 private:
  LruBlocks host_;
  LruBlocks disk_;
};

}  // namespace strata::bench
