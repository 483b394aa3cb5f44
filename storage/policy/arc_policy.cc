#include "storage/policy/arc_policy.h"

#include <algorithm>

namespace strata::storage {

ArcPolicy::ArcPolicy(uint64_t capacity_bytes)
    : QueuePolicy(2),
      capacity_(capacity_bytes),
      ghost_recent_(capacity_bytes),
      ghost_frequent_(2 * capacity_bytes) {}

void ArcPolicy::OnInsert(const PolicyChunkInfo& info) {
  if (chunks_.Find(info.id) != nullptr) return;
  const uint64_t b1 = ghost_recent_.bytes();
  const uint64_t b2 = ghost_frequent_.bytes();
  Queue queue = kRecent;
  if (ghost_recent_.Take(info.key_hash)) {
    // B1 hit: T1 was too small. delta = max(|B2| / |B1|, 1) chunks.
    const uint64_t delta = std::max<uint64_t>(b2 / std::max<uint64_t>(b1, 1), 1) * info.size_bytes;
    target_t1_ = std::min(capacity_, target_t1_ + delta);
    queue = kFrequent;
  } else if (ghost_frequent_.Take(info.key_hash)) {
    const uint64_t delta = std::max<uint64_t>(b1 / std::max<uint64_t>(b2, 1), 1) * info.size_bytes;
    target_t1_ = target_t1_ > delta ? target_t1_ - delta : 0;
    queue = kFrequent;
  } else if (info.reused) {
    queue = kFrequent;
  }
  chunks_.Insert(info, queue);
  // |T1| + |B1| <= c and |T1| + |T2| + |B1| + |B2| <= 2c.
  const uint64_t t1 = chunks_.bytes(kRecent);
  const uint64_t resident = t1 + chunks_.bytes(kFrequent);
  ghost_recent_.TrimTo(capacity_ > t1 ? capacity_ - t1 : 0);
  const uint64_t room = 2 * capacity_ - std::min(2 * capacity_, resident + ghost_recent_.bytes());
  ghost_frequent_.TrimTo(room);
}

void ArcPolicy::OnAccess(ChunkId id) {
  QueueSet::Entry* entry = chunks_.Find(id);
  if (entry != nullptr) chunks_.MoveTo(id, *entry, kFrequent);
}

std::optional<ChunkId> ArcPolicy::PopVictim() {
  const bool recent_first =
      !chunks_.empty(kRecent) && (chunks_.bytes(kRecent) > target_t1_ || chunks_.empty(kFrequent));
  if (!recent_first && chunks_.empty(kFrequent)) return std::nullopt;
  const Queue queue = recent_first ? kRecent : kFrequent;
  const ChunkId victim = chunks_.front(queue);
  const QueueSet::Entry entry = chunks_.Erase(victim);
  (queue == kRecent ? ghost_recent_ : ghost_frequent_).Add(entry.key_hash, entry.size_bytes);
  return victim;
}

}  // namespace strata::storage
