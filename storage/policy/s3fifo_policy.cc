#include "storage/policy/s3fifo_policy.h"

#include <algorithm>

namespace strata::storage {

S3FifoPolicy::S3FifoPolicy(uint64_t capacity_bytes)
    : QueuePolicy(2), small_target_(capacity_bytes / 10), ghost_(capacity_bytes) {}

void S3FifoPolicy::OnInsert(const PolicyChunkInfo& info) {
  if (chunks_.Find(info.id) != nullptr) return;
  const bool remembered = ghost_.Take(info.key_hash);
  chunks_.Insert(info, remembered || info.reused ? kMain : kSmall);
}

void S3FifoPolicy::OnAccess(ChunkId id) {
  QueueSet::Entry* entry = chunks_.Find(id);
  if (entry != nullptr) entry->counter = std::min<uint8_t>(entry->counter + 1, kMaxReads);
}

std::optional<ChunkId> S3FifoPolicy::PopVictim() {
  // Each pass either evicts or moves a chunk with a non-zero counter, lowering a counter:
  // the loop ends after at most (kMaxReads + 1) passes per listed chunk.
  while (true) {
    if (!chunks_.empty(kSmall) &&
        (chunks_.bytes(kSmall) >= small_target_ || chunks_.empty(kMain))) {
      const ChunkId id = chunks_.front(kSmall);
      QueueSet::Entry& entry = *chunks_.Find(id);
      if (entry.counter > 0) {
        entry.counter = 0;
        chunks_.MoveTo(id, entry, kMain);
        continue;
      }
      const QueueSet::Entry evicted = chunks_.Erase(id);
      ghost_.Add(evicted.key_hash, evicted.size_bytes);
      return id;
    }
    if (chunks_.empty(kMain)) return std::nullopt;
    const ChunkId id = chunks_.front(kMain);
    QueueSet::Entry& entry = *chunks_.Find(id);
    if (entry.counter > 0) {
      --entry.counter;
      chunks_.MoveTo(id, entry, kMain);
      continue;
    }
    chunks_.Erase(id);
    return id;
  }
}

}  // namespace strata::storage
