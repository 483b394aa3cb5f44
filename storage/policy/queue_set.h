// QueueSet is the bookkeeping shared by the queue-based policies (LRU, ARC, S3-FIFO, adaptive,
// prefix-LRU): every tracked chunk has one entry, and each evictable chunk is listed in one of
// a few ordered queues (front = oldest). A protected chunk stays tracked but unlisted, so a
// policy can only ever pick listed, evictable chunks. Entries live in one slot array with
// intrusive links (no allocation per chunk once warm); every operation is O(1). Not
// thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "storage/policy/eviction_policy.h"

namespace strata::storage {

class QueueSet {
 public:
  struct Entry {
    uint64_t key_hash = 0;
    uint64_t size_bytes = 0;
    // The queue the chunk belongs to; it is listed there only while evictable.
    uint8_t queue = 0;
    bool evictable = true;
    // Free for the policy: an access bit or a small frequency counter.
    uint8_t counter = 0;
  };

  explicit QueueSet(size_t num_queues) : queues_(num_queues) {}

  // nullptr when `id` is not tracked. The pointer is valid until the next Insert or Erase.
  Entry* Find(ChunkId id);
  // Tracks a new chunk at the back of `queue`; nullptr (and no change) when `id` is tracked.
  Entry* Insert(const PolicyChunkInfo& info, uint8_t queue);
  // Moves a tracked chunk to the back (newest end) of `queue`, or to its front (next to go)
  // when `to_front`; it is listed there only while evictable.
  void MoveTo(ChunkId id, Entry& entry, uint8_t queue, bool to_front = false);
  // Unlists (false) or relists at the back of its queue (true); no-op when unchanged.
  void SetEvictable(ChunkId id, Entry& entry, bool evictable);
  // Stops tracking `id`; returns its entry as it was. Precondition: tracked.
  Entry Erase(ChunkId id);

  bool empty(uint8_t queue) const { return queues_[queue].front == kNil; }
  // The oldest chunk listed in `queue`. Precondition: !empty(queue).
  ChunkId front(uint8_t queue) const { return slots_[queues_[queue].front].id; }
  // Bytes of the chunks listed in `queue`.
  uint64_t bytes(uint8_t queue) const { return queues_[queue].bytes; }
  size_t size() const { return index_.size(); }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;

  struct Slot {
    Entry entry;
    ChunkId id = kNoChunk;
    uint32_t prev = kNil;  // toward the front; the free list's link when free
    uint32_t next = kNil;  // toward the back
  };
  struct Queue {
    uint32_t front = kNil;
    uint32_t back = kNil;
    uint64_t bytes = 0;
  };

  uint32_t SlotOf(const Entry& entry) const;
  void Link(uint32_t slot, bool at_front);
  void Unlink(uint32_t slot);

  std::vector<Queue> queues_;
  std::vector<Slot> slots_;
  uint32_t free_ = kNil;  // free slots, chained through `next`
  absl::flat_hash_map<ChunkId, uint32_t> index_;
};

}  // namespace strata::storage
