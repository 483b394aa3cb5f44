#include "storage/policy/adaptive_policy.h"

#include <algorithm>

namespace strata::storage {

AdaptivePolicy::AdaptivePolicy(uint64_t capacity_bytes, const AdaptivePolicyOptions& options)
    : QueuePolicy(3),
      capacity_(capacity_bytes),
      step_chunks_(options.adaptation_step_chunks),
      probation_target_(static_cast<uint64_t>(options.initial_probation_fraction * capacity_bytes)),
      ghost_probation_(static_cast<uint64_t>(options.ghost_fraction * capacity_bytes)),
      ghost_main_(static_cast<uint64_t>(options.ghost_fraction * capacity_bytes)) {}

void AdaptivePolicy::OnInsert(const PolicyChunkInfo& info) {
  if (chunks_.Find(info.id) != nullptr) return;
  if (info.partial) {
    chunks_.Insert(info, kPartial);
    return;
  }
  const uint64_t step = uint64_t{step_chunks_} * info.size_bytes;
  Queue queue = kProbation;
  if (ghost_probation_.Take(info.key_hash)) {
    probation_target_ = std::min(capacity_, probation_target_ + step);
    queue = kMain;
  } else if (ghost_main_.Take(info.key_hash)) {
    probation_target_ = probation_target_ > step ? probation_target_ - step : 0;
    queue = kMain;
  } else if (info.reused) {
    queue = kMain;
  }
  chunks_.Insert(info, queue);
}

void AdaptivePolicy::OnAccess(ChunkId id) {
  QueueSet::Entry* entry = chunks_.Find(id);
  if (entry != nullptr) chunks_.MoveTo(id, *entry, kMain);
}

std::optional<ChunkId> AdaptivePolicy::PopVictim() {
  Queue queue = kPartial;
  if (chunks_.empty(kPartial)) {
    const bool probation_first =
        !chunks_.empty(kProbation) &&
        (chunks_.bytes(kProbation) > probation_target_ || chunks_.empty(kMain));
    queue = probation_first ? kProbation : kMain;
    if (chunks_.empty(queue)) return std::nullopt;
  }
  const ChunkId victim = chunks_.front(queue);
  const QueueSet::Entry evicted = chunks_.Erase(victim);
  // Partial chunks leave no history: their keys do not come back.
  if (queue == kProbation) ghost_probation_.Add(evicted.key_hash, evicted.size_bytes);
  if (queue == kMain) ghost_main_.Add(evicted.key_hash, evicted.size_bytes);
  return victim;
}

}  // namespace strata::storage
