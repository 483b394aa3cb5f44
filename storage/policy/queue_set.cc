#include "storage/policy/queue_set.h"

#include <cstddef>

#include "core/check.h"

namespace strata::storage {

QueueSet::Entry* QueueSet::Find(ChunkId id) {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &slots_[it->second].entry;
}

QueueSet::Entry* QueueSet::Insert(const PolicyChunkInfo& info, uint8_t queue) {
  auto [it, inserted] = index_.try_emplace(info.id);
  if (!inserted) return nullptr;
  uint32_t slot = free_;
  if (slot == kNil) {
    STRATA_CHECK(slots_.size() < kNil);
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    free_ = slots_[slot].next;
  }
  it->second = slot;
  Slot& s = slots_[slot];
  s.id = info.id;
  s.entry = {.key_hash = info.key_hash, .size_bytes = info.size_bytes, .queue = queue};
  Link(slot, /*at_front=*/false);
  return &s.entry;
}

void QueueSet::MoveTo(ChunkId id, Entry& entry, uint8_t queue, bool to_front) {
  const uint32_t slot = SlotOf(entry);
  STRATA_DCHECK(slots_[slot].id == id);
  if (entry.evictable) Unlink(slot);
  entry.queue = queue;
  if (entry.evictable) Link(slot, to_front);
}

void QueueSet::SetEvictable(ChunkId id, Entry& entry, bool evictable) {
  if (entry.evictable == evictable) return;
  const uint32_t slot = SlotOf(entry);
  STRATA_DCHECK(slots_[slot].id == id);
  entry.evictable = evictable;
  if (evictable) {
    Link(slot, /*at_front=*/false);
  } else {
    Unlink(slot);
  }
}

QueueSet::Entry QueueSet::Erase(ChunkId id) {
  auto it = index_.find(id);
  STRATA_CHECK(it != index_.end());
  const uint32_t slot = it->second;
  index_.erase(it);
  Slot& s = slots_[slot];
  const Entry entry = s.entry;
  if (entry.evictable) Unlink(slot);
  s.id = kNoChunk;
  s.next = free_;
  free_ = slot;
  return entry;
}

uint32_t QueueSet::SlotOf(const Entry& entry) const {
  const Slot* slot = reinterpret_cast<const Slot*>(reinterpret_cast<const std::byte*>(&entry) -
                                                   offsetof(Slot, entry));
  return static_cast<uint32_t>(slot - slots_.data());
}

void QueueSet::Link(uint32_t slot, bool at_front) {
  Slot& s = slots_[slot];
  Queue& queue = queues_[s.entry.queue];
  queue.bytes += s.entry.size_bytes;
  if (queue.front == kNil) {
    s.prev = s.next = kNil;
    queue.front = queue.back = slot;
  } else if (at_front) {
    s.prev = kNil;
    s.next = queue.front;
    slots_[queue.front].prev = slot;
    queue.front = slot;
  } else {
    s.next = kNil;
    s.prev = queue.back;
    slots_[queue.back].next = slot;
    queue.back = slot;
  }
}

void QueueSet::Unlink(uint32_t slot) {
  Slot& s = slots_[slot];
  Queue& queue = queues_[s.entry.queue];
  queue.bytes -= s.entry.size_bytes;
  (s.prev == kNil ? queue.front : slots_[s.prev].next) = s.next;
  (s.next == kNil ? queue.back : slots_[s.next].prev) = s.prev;
  s.prev = s.next = kNil;
}

}  // namespace strata::storage
