#include "controller/index/instance_table.h"

#include "absl/strings/str_cat.h"
#include "controller/index/holder_list.h"
#include "core/check.h"

namespace strata::controller::internal_index {
namespace {

// This abseil's string_view is its own type, not std::string_view.
absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace

InstanceTable::InstanceTable(uint32_t max_instances)
    : slots_(max_instances), live_tags_(max_instances, 0) {
  STRATA_CHECK(max_instances >= 1 && max_instances <= kMaxInstances);
  free_slots_.reserve(max_instances);
  for (uint32_t slot = max_instances; slot > 0; --slot) {
    free_slots_.push_back(static_cast<uint16_t>(slot - 1));
  }
}

absl::StatusOr<uint16_t> InstanceTable::Register(std::string_view instance_id) {
  if (instance_id.empty()) return absl::InvalidArgumentError("empty instance id");
  if (ids_.contains(AbslView(instance_id))) {
    return absl::FailedPreconditionError(
        absl::StrCat("instance '", AbslView(instance_id), "' is registered already"));
  }
  if (free_slots_.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot register '", AbslView(instance_id),
                                                     "': all ", slots_.size(),
                                                     " instance slots are taken"));
  }
  const uint16_t slot = free_slots_.back();
  free_slots_.pop_back();
  Slot& s = slots_[slot];
  s.instance_id = std::string(instance_id);
  s.live_entries = 0;
  SetLiveTag(slot, kLiveTagBit | generation_tag(slot));
  ids_.emplace(s.instance_id, slot);
  return slot;
}

absl::StatusOr<uint16_t> InstanceTable::Find(std::string_view instance_id) const {
  const auto it = ids_.find(AbslView(instance_id));
  if (it == ids_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("instance '", AbslView(instance_id), "' is not registered"));
  }
  return it->second;
}

uint64_t InstanceTable::Drop(uint16_t slot) {
  Slot& s = slots_[slot];
  STRATA_DCHECK(!s.instance_id.empty());
  const uint64_t live = s.live_entries;
  NextGeneration(slot);
  SetLiveTag(slot, 0);
  ids_.erase(s.instance_id);
  s.instance_id.clear();
  s.live_entries = 0;
  free_slots_.push_back(slot);
  return live;
}

uint64_t InstanceTable::Clear(uint16_t slot) {
  Slot& s = slots_[slot];
  STRATA_DCHECK(!s.instance_id.empty());
  const uint64_t live = s.live_entries;
  NextGeneration(slot);
  SetLiveTag(slot, kLiveTagBit | generation_tag(slot));
  s.live_entries = 0;
  return live;
}

bool InstanceTable::GenerationWindowFull(uint16_t slot) const {
  const Slot& s = slots_[slot];
  return s.generation + 1 - s.floor_generation > kGenerationTagMask;
}

void InstanceTable::NextGeneration(uint16_t slot) {
  STRATA_CHECK(!GenerationWindowFull(slot));
  ++slots_[slot].generation;
}

void InstanceTable::BeginSweepPass() {
  for (Slot& s : slots_) s.pass_generation = s.generation;
}

void InstanceTable::EndSweepPass() {
  for (Slot& s : slots_) s.floor_generation = s.pass_generation;
}

uint16_t InstanceTable::generation_tag(uint16_t slot) const {
  return static_cast<uint16_t>(slots_[slot].generation & kGenerationTagMask);
}

void InstanceTable::AddLiveEntries(uint16_t slot, int64_t delta) {
  slots_[slot].live_entries =
      static_cast<uint64_t>(static_cast<int64_t>(slots_[slot].live_entries) + delta);
}

size_t InstanceTable::MemoryBytes() const {
  size_t bytes = slots_.capacity() * sizeof(Slot) + live_tags_.capacity() * sizeof(uint16_t) +
                 free_slots_.capacity() * sizeof(uint16_t) +
                 ids_.capacity() * (sizeof(std::string) + sizeof(uint16_t) + 1);
  for (const Slot& s : slots_) {
    if (s.instance_id.capacity() > 15) bytes += s.instance_id.capacity() + 1;
  }
  return bytes;
}

}  // namespace strata::controller::internal_index
