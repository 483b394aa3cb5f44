#include "storage/policy/lru_policy.h"

namespace strata::storage {

void LruPolicy::OnInsert(const PolicyChunkInfo& info) {
  auto [it, inserted] = entries_.try_emplace(info.id);
  if (!inserted) return;
  evictable_.push_front(info.id);
  it->second.position = evictable_.begin();
}

void LruPolicy::OnAccess(ChunkId id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || !it->second.evictable) return;
  evictable_.splice(evictable_.begin(), evictable_, it->second.position);
}

void LruPolicy::OnRemove(ChunkId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  if (it->second.evictable) evictable_.erase(it->second.position);
  entries_.erase(it);
}

void LruPolicy::SetEvictable(ChunkId id, bool evictable) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.evictable == evictable) return;
  it->second.evictable = evictable;
  if (evictable) {
    evictable_.push_front(id);
    it->second.position = evictable_.begin();
  } else {
    evictable_.erase(it->second.position);
  }
}

std::optional<ChunkId> LruPolicy::PopVictim() {
  if (evictable_.empty()) return std::nullopt;
  const ChunkId victim = evictable_.back();
  evictable_.pop_back();
  entries_.erase(victim);
  return victim;
}

}  // namespace strata::storage
