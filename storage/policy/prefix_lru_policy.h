// PrefixLruPolicy is LRU over the leaves of the prefix tree (the radix-tree view of SGLang's
// RadixCache): a chunk whose chain continues in the tier is not a victim while a leaf is,
// because evicting the head of a chain orphans its tail (a prefix lookup stops at the first
// miss, so the tail is never read again). When a leaf leaves, its parent becomes a leaf and
// joins the cold end: a cold chain goes tail first, head last. Chunks whose descendants are all
// protected are evicted only when no leaf is evictable, least recently used first.
// O(1) per operation. Not thread-safe.
#pragma once

#include "absl/container/flat_hash_map.h"
#include "storage/policy/queue_policy.h"

namespace strata::storage {

class PrefixLruPolicy final : public QueuePolicy {
 public:
  PrefixLruPolicy() : QueuePolicy(2) {}

  std::string_view name() const override { return "prefix-lru"; }
  void OnInsert(const PolicyChunkInfo& info) override;
  void OnAccess(ChunkId id) override;
  void OnRemove(ChunkId id) override;
  std::optional<ChunkId> PopVictim() override;

 private:
  enum Queue : uint8_t { kLeaves = 0, kInner = 1 };
  struct Link {
    ChunkId parent = kNoChunk;
    uint64_t parent_hash = 0;  // tells a live parent from a reused id
    uint32_t children = 0;     // resident children
  };

  // Stops tracking `id` and updates its parent's child count.
  void Forget(ChunkId id);

  absl::flat_hash_map<ChunkId, Link> links_;
};

}  // namespace strata::storage
