#include "storage/policy/lru_policy.h"

namespace strata::storage {

void LruPolicy::OnInsert(const PolicyChunkInfo& info) { chunks_.Insert(info, 0); }

void LruPolicy::OnAccess(ChunkId id) {
  QueueSet::Entry* entry = chunks_.Find(id);
  if (entry != nullptr) chunks_.MoveTo(id, *entry, 0);
}

std::optional<ChunkId> LruPolicy::PopVictim() {
  if (chunks_.empty(0)) return std::nullopt;
  const ChunkId victim = chunks_.front(0);
  chunks_.Erase(victim);
  return victim;
}

}  // namespace strata::storage
