// AdaptivePolicy is Strata's default: a probation FIFO in front of a protected LRU, with the
// split between them learned from ghost hits, and the last partial chunk of a prompt kept
// only until space is needed. Built for KV traffic where most chunks are never read again
// (about 3 in 4 on the production conversation trace) and the partial tail chunk almost never
// is (its key changes when the conversation grows).
//
//   partial chunks -> [partial FIFO]                 evicted first, no history kept
//   new chunks     -> [probation FIFO] --read--> [main LRU]
//   ghost hits     ------------------------------> [main LRU]
//
// A chunk read while on probation (or a partial chunk that is read) moves to main at once.
// Eviction takes, in order: the oldest partial chunk; the oldest probation chunk while
// probation holds more than its target; otherwise main's least recently used.
// Each evicted chunk is remembered in the ghost list of the queue it left. A chunk that
// returns while remembered enters main directly and moves the probation target, ARC-style:
// toward a larger probation when probation evicted it (new chunks needed more time to prove
// themselves), toward a smaller one when main did. The defaults were chosen on the
// conversation trace and checked on synthetic multi-round-QA and RAG traces
// (`strata-bench trace`). Every operation is O(1) amortized. Not thread-safe.
#pragma once

#include "storage/policy/ghost_list.h"
#include "storage/policy/queue_policy.h"

namespace strata::storage {

struct AdaptivePolicyOptions {
  // Starting probation target, as a fraction of the capacity.
  double initial_probation_fraction = 0.5;
  // How far one ghost hit moves the probation target, in sizes of the returning chunk.
  uint32_t adaptation_step_chunks = 1;
  // Bytes each ghost list remembers, as a fraction of the capacity.
  double ghost_fraction = 0.5;
};

class AdaptivePolicy final : public QueuePolicy {
 public:
  // `capacity_bytes` (> 0) is the size of the tier.
  AdaptivePolicy(uint64_t capacity_bytes, const AdaptivePolicyOptions& options = {});

  std::string_view name() const override { return "adaptive"; }
  void OnInsert(const PolicyChunkInfo& info) override;
  void OnAccess(ChunkId id) override;
  std::optional<ChunkId> PopVictim() override;

  // Current probation target in bytes (for tests and the benchmark).
  uint64_t probation_target_bytes() const { return probation_target_; }

 private:
  enum Queue : uint8_t { kPartial = 0, kProbation = 1, kMain = 2 };

  const uint64_t capacity_;
  const uint32_t step_chunks_;
  uint64_t probation_target_;
  GhostList ghost_probation_;
  GhostList ghost_main_;
};

}  // namespace strata::storage
