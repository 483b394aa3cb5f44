// ArcPolicy is Adaptive Replacement Cache (Megiddo and Modha, FAST'03) measured in bytes:
// T1 holds chunks seen once, T2 chunks seen again; ghost lists B1 and B2 remember what each
// evicted, and a hit in a ghost list moves the target size of T1 (p) toward the side that
// would have kept it. Eviction takes T1's oldest chunk while T1 is above p, else T2's least
// recently used. A reference policy for the trace benchmark. Not thread-safe.
#pragma once

#include "storage/policy/ghost_list.h"
#include "storage/policy/queue_policy.h"

namespace strata::storage {

class ArcPolicy final : public QueuePolicy {
 public:
  // `capacity_bytes` (> 0) is the size of the tier: c in the paper.
  explicit ArcPolicy(uint64_t capacity_bytes);

  std::string_view name() const override { return "arc"; }
  void OnInsert(const PolicyChunkInfo& info) override;
  void OnAccess(ChunkId id) override;
  std::optional<ChunkId> PopVictim() override;

  // Target bytes of T1 (for tests).
  uint64_t target_recent_bytes() const { return target_t1_; }

 private:
  enum Queue : uint8_t { kRecent = 0, kFrequent = 1 };

  const uint64_t capacity_;
  uint64_t target_t1_ = 0;
  GhostList ghost_recent_;    // B1
  GhostList ghost_frequent_;  // B2
};

}  // namespace strata::storage
