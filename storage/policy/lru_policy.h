// LruPolicy evicts the least recently inserted or accessed evictable chunk. The baseline every
// other policy is measured against. Not thread-safe (see EvictionPolicy).
#pragma once

#include <list>

#include "absl/container/flat_hash_map.h"
#include "storage/policy/eviction_policy.h"

namespace strata::storage {

class LruPolicy final : public EvictionPolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void OnInsert(const PolicyChunkInfo& info) override;
  void OnAccess(ChunkId id) override;
  void OnRemove(ChunkId id) override;
  void SetEvictable(ChunkId id, bool evictable) override;
  std::optional<ChunkId> PopVictim() override;
  size_t size() const override { return entries_.size(); }

 private:
  struct Entry {
    std::list<ChunkId>::iterator position;  // in evictable_ when evictable
    bool evictable = true;
  };

  // Front = most recently used; only evictable chunks are listed. A protected chunk re-enters
  // at the front when released: it was in use until then.
  std::list<ChunkId> evictable_;
  absl::flat_hash_map<ChunkId, Entry> entries_;
};

}  // namespace strata::storage
