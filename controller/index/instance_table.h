// InstanceTable: the registered instances of the cluster index. It maps each instance id (a
// string the daemon announces) to a small dense slot, 0 to max_instances - 1, and gives each slot
// a generation that changes whenever the instance's chunks must vanish at once (the instance is
// dropped, or it reports that it cleared everything). Chunk holders carry the generation they
// were stored under (holder_list.h), so the change makes all of them stale in O(1).
//
// Slots are reused: a dropped slot goes back to a free list and may be given to any id later, a
// re-registered id included, under a generation newer than every holder left in the index from
// its earlier owners, so those holders stay stale and nothing is resurrected.
//
// Generation window: holders keep only a 12-bit tag of their generation. The table records, per
// slot, the oldest generation a holder in the index may still carry (its floor, raised by each
// completed sweep pass: BeginSweepPass / EndSweepPass) and reports when advancing the generation
// once more would let a new tag equal a stale holder's (GenerationWindowFull); the index then
// completes a sweep before advancing.
//
// Thread-compatible: the owner (ClusterIndex) serializes every call, except LiveTag, which any
// thread may call concurrently with them (live tags are stored atomically, in order: a LiveTag
// that starts after Drop or Clear returned sees the new tag).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::controller::internal_index {

class InstanceTable {
 public:
  // Slots are 16-bit in holders.
  static constexpr uint32_t kMaxInstances = 1u << 16;

  // `max_instances` in [1, kMaxInstances] (checked by ClusterIndex::Create).
  explicit InstanceTable(uint32_t max_instances);

  // Registers `instance_id` under a free slot, with a fresh generation; returns the slot.
  // kInvalidArgument for an empty id, kFailedPrecondition when the id is registered already,
  // kResourceExhausted when every slot is taken.
  absl::StatusOr<uint16_t> Register(std::string_view instance_id);

  // The slot of a registered id; kFailedPrecondition when it is not registered.
  absl::StatusOr<uint16_t> Find(std::string_view instance_id) const;

  // Unregisters the instance in `slot` (a registered slot): its live tag becomes 0 and its slot
  // free. Returns the number of (chunk, instance) entries it had live, now stale.
  uint64_t Drop(uint16_t slot);

  // Moves the registered `slot` to a new generation; it stays registered with no live entries.
  // Returns the number of entries it had live, now stale. The caller checks
  // GenerationWindowFull first.
  uint64_t Clear(uint16_t slot);

  // True when the next generation of `slot` would reuse the tag of a generation older than the
  // floor: complete a sweep pass (which raises the floor) before Drop or Clear.
  bool GenerationWindowFull(uint16_t slot) const;

  // A sweep pass visits every chunk once and removes the stale holders it finds. Begin records
  // each slot's generation; End (when the pass has visited everything) raises each slot's floor
  // to the generation recorded at Begin: no holder older than that survived the pass.
  void BeginSweepPass();
  void EndSweepPass();

  // Indexed by slot: the tag a current holder of the slot carries; 0 for free slots.
  std::span<const uint16_t> live_tags() const { return live_tags_; }
  // live_tags()[slot], for readers concurrent with the owner's calls. Any thread.
  uint16_t LiveTag(uint16_t slot) const {
    return std::atomic_ref<uint16_t>(const_cast<uint16_t&>(live_tags_[slot]))
        .load(std::memory_order_acquire);
  }
  // The generation tag new holders of a registered `slot` get.
  uint16_t generation_tag(uint16_t slot) const;
  const std::string& instance_id(uint16_t slot) const { return slots_[slot].instance_id; }

  // Live entries of `slot`; the index adjusts them as holders come and go.
  void AddLiveEntries(uint16_t slot, int64_t delta);

  size_t registered() const { return ids_.size(); }
  size_t MemoryBytes() const;

 private:
  struct Slot {
    std::string instance_id;  // empty when free
    uint32_t generation = 0;
    uint32_t floor_generation = 0;
    uint32_t pass_generation = 0;  // the generation at BeginSweepPass
    uint64_t live_entries = 0;
  };

  void NextGeneration(uint16_t slot);
  void SetLiveTag(uint16_t slot, uint16_t tag) {
    std::atomic_ref<uint16_t>(live_tags_[slot]).store(tag, std::memory_order_seq_cst);
  }

  std::vector<Slot> slots_;
  std::vector<uint16_t> live_tags_;
  std::vector<uint16_t> free_slots_;  // a stack; the lowest slot on top at start
  absl::flat_hash_map<std::string, uint16_t> ids_;
};

}  // namespace strata::controller::internal_index
