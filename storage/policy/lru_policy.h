// LruPolicy evicts the least recently inserted or accessed evictable chunk. The baseline every
// other policy is measured against. Not thread-safe (see EvictionPolicy).
#pragma once

#include "storage/policy/queue_policy.h"

namespace strata::storage {

// One queue, back = most recently used. A protected chunk re-enters at the back when released:
// it was in use until then.
class LruPolicy final : public QueuePolicy {
 public:
  LruPolicy() : QueuePolicy(1) {}

  std::string_view name() const override { return "lru"; }
  void OnInsert(const PolicyChunkInfo& info) override;
  void OnAccess(ChunkId id) override;
  std::optional<ChunkId> PopVictim() override;
};

}  // namespace strata::storage
