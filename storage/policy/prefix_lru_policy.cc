#include "storage/policy/prefix_lru_policy.h"

namespace strata::storage {

void PrefixLruPolicy::OnInsert(const PolicyChunkInfo& info) {
  if (chunks_.Insert(info, kLeaves) == nullptr) return;
  Link& link = links_[info.id];
  link = {};
  if (info.parent == kNoChunk) return;
  QueueSet::Entry* parent = chunks_.Find(info.parent);
  if (parent == nullptr) return;
  link.parent = info.parent;
  link.parent_hash = parent->key_hash;
  if (links_[info.parent].children++ == 0) chunks_.MoveTo(info.parent, *parent, kInner);
}

void PrefixLruPolicy::OnAccess(ChunkId id) {
  QueueSet::Entry* entry = chunks_.Find(id);
  if (entry != nullptr) chunks_.MoveTo(id, *entry, entry->queue);
}

void PrefixLruPolicy::OnRemove(ChunkId id) {
  if (chunks_.Find(id) != nullptr) Forget(id);
}

std::optional<ChunkId> PrefixLruPolicy::PopVictim() {
  const Queue queue = chunks_.empty(kLeaves) ? kInner : kLeaves;
  if (chunks_.empty(queue)) return std::nullopt;
  const ChunkId victim = chunks_.front(queue);
  Forget(victim);
  return victim;
}

void PrefixLruPolicy::Forget(ChunkId id) {
  chunks_.Erase(id);
  auto it = links_.find(id);
  const Link link = it->second;
  links_.erase(it);
  if (link.parent == kNoChunk) return;
  QueueSet::Entry* parent = chunks_.Find(link.parent);
  if (parent == nullptr || parent->key_hash != link.parent_hash) return;
  // A stale link (the parent was removed and its key stored again) may find a count of 0.
  uint32_t& children = links_[link.parent].children;
  if (children > 0 && --children == 0) {
    chunks_.MoveTo(link.parent, *parent, kLeaves, /*to_front=*/true);
  }
}

}  // namespace strata::storage
