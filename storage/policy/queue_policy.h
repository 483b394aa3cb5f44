// QueuePolicy is the base of the policies whose whole state is a QueueSet (plus ghost lists):
// removal, protection and size are the same for all of them.
#pragma once

#include "storage/policy/eviction_policy.h"
#include "storage/policy/queue_set.h"

namespace strata::storage {

class QueuePolicy : public EvictionPolicy {
 public:
  void OnRemove(ChunkId id) override {
    if (chunks_.Find(id) != nullptr) chunks_.Erase(id);
  }
  void SetEvictable(ChunkId id, bool evictable) override {
    QueueSet::Entry* entry = chunks_.Find(id);
    if (entry != nullptr) chunks_.SetEvictable(id, *entry, evictable);
  }
  size_t size() const override { return chunks_.size(); }

 protected:
  explicit QueuePolicy(size_t num_queues) : chunks_(num_queues) {}

  QueueSet chunks_;
};

}  // namespace strata::storage
