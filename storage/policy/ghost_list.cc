#include "storage/policy/ghost_list.h"

#include <algorithm>

namespace strata::storage {

void GhostList::Add(uint64_t key_hash, uint64_t size_bytes) {
  const uint64_t sequence = next_sequence_++;
  auto [it, inserted] = live_.try_emplace(key_hash);
  if (!inserted) bytes_ -= it->second.size_bytes;
  it->second = {.sequence = sequence, .size_bytes = size_bytes};
  bytes_ += size_bytes;
  ring_.push_back({.key_hash = key_hash, .sequence = sequence});
  TrimTo(capacity_bytes_);
  CompactIfMostlyStale();
}

bool GhostList::Take(uint64_t key_hash) {
  auto it = live_.find(key_hash);
  if (it == live_.end()) return false;
  bytes_ -= it->second.size_bytes;
  live_.erase(it);
  CompactIfMostlyStale();
  return true;
}

void GhostList::TrimTo(uint64_t bytes) {
  while (bytes_ > bytes && !ring_.empty()) {
    const RingEntry oldest = ring_.front();
    ring_.pop_front();
    auto it = live_.find(oldest.key_hash);
    if (it == live_.end() || it->second.sequence != oldest.sequence) continue;  // stale
    bytes_ -= it->second.size_bytes;
    live_.erase(it);
  }
}

bool GhostList::IsLive(const RingEntry& entry) const {
  auto it = live_.find(entry.key_hash);
  return it != live_.end() && it->second.sequence == entry.sequence;
}

void GhostList::CompactIfMostlyStale() {
  // Rebuilding costs O(ring) and runs only after ring / 2 stale entries piled up since the
  // last one: O(1) amortized per operation.
  if (ring_.size() <= 2 * live_.size() + 1024) return;
  std::deque<RingEntry> live_only;
  std::copy_if(ring_.begin(), ring_.end(), std::back_inserter(live_only),
               [this](const RingEntry& entry) { return IsLive(entry); });
  ring_.swap(live_only);
}

}  // namespace strata::storage
