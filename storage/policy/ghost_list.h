// GhostList remembers the key hashes of recently evicted chunks, oldest first, up to a byte
// budget: the history adaptive policies consult when a chunk comes back. It holds no payload;
// a hit only says "this chunk was evicted recently". A FIFO ring with lazy deletion: Take
// leaves a stale ring entry behind, skipped when it reaches the front, and the ring is
// compacted when stale entries outnumber live ones. O(1) amortized. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>

#include "absl/container/flat_hash_map.h"

namespace strata::storage {

class GhostList {
 public:
  // Remembers up to `capacity_bytes` of evicted chunks (sizes as they were when resident).
  explicit GhostList(uint64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // Records an eviction, dropping the oldest entries past the budget. A hash already present
  // moves to the newest position.
  void Add(uint64_t key_hash, uint64_t size_bytes);
  // Forgets `key_hash` and answers whether it was remembered.
  bool Take(uint64_t key_hash);
  // Drops the oldest entries until at most `bytes` are remembered.
  void TrimTo(uint64_t bytes);

  uint64_t bytes() const { return bytes_; }
  size_t size() const { return live_.size(); }

 private:
  struct Remembered {
    uint64_t sequence = 0;  // of its ring entry; older ring entries of the hash are stale
    uint64_t size_bytes = 0;
  };
  struct RingEntry {
    uint64_t key_hash = 0;
    uint64_t sequence = 0;
  };

  bool IsLive(const RingEntry& entry) const;
  void CompactIfMostlyStale();

  uint64_t capacity_bytes_;
  uint64_t bytes_ = 0;
  uint64_t next_sequence_ = 0;
  std::deque<RingEntry> ring_;  // front = oldest
  absl::flat_hash_map<uint64_t, Remembered> live_;
};

}  // namespace strata::storage
