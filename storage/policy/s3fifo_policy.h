// S3FifoPolicy is S3-FIFO (Yang et al., SOSP'23) measured in bytes: new chunks enter a small
// FIFO (10% of the capacity); those read while there move to the main FIFO, the rest leave
// and are remembered in a ghost FIFO, from which a returning chunk goes straight to main. Main
// is a CLOCK with a 2-bit read counter: a chunk with reads left is reinserted with one fewer.
// Scan-resistant: one-time chunks never reach main. Not thread-safe.
#pragma once

#include "storage/policy/ghost_list.h"
#include "storage/policy/queue_policy.h"

namespace strata::storage {

class S3FifoPolicy final : public QueuePolicy {
 public:
  // `capacity_bytes` (> 0) is the size of the tier.
  explicit S3FifoPolicy(uint64_t capacity_bytes);

  std::string_view name() const override { return "s3fifo"; }
  void OnInsert(const PolicyChunkInfo& info) override;
  void OnAccess(ChunkId id) override;
  std::optional<ChunkId> PopVictim() override;

 private:
  enum Queue : uint8_t { kSmall = 0, kMain = 1 };
  static constexpr uint8_t kMaxReads = 3;

  const uint64_t small_target_;
  GhostList ghost_;
};

}  // namespace strata::storage
