// HolderList: which instances hold one chunk, and in which tiers: the working copy the cluster
// index (cluster_index.h) decodes a chunk's holders into, changes, and stores back
// (holder_store.h keeps them 4 bytes per holder, two inline in the chunk's table entry).
// Plain values and free functions; thread-compatible.
//
// A holder records the instance's slot in the InstanceTable and a tag of the slot's generation
// at the time the chunk was stored. The holder is current while that tag equals the slot's live
// tag (InstanceTable::live_tags()); dropping or clearing an instance changes the live tag, which
// makes every holder of the old generation stale at once, without touching them. Stale holders
// are removed by PurgeStale, when their chunk is next written or swept.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/container/inlined_vector.h"
#include "controller/index/chunk_event.h"

namespace strata::controller::internal_index {

// Generation tags are the low 12 bits of a slot's generation. InstanceTable keeps every stale
// holder's generation within the last 2^12 - 1 generations of its slot (see
// InstanceTable::GenerationWindowFull), so a tag never matches an older generation.
inline constexpr uint32_t kGenerationTagBits = 12;
inline constexpr uint16_t kGenerationTagMask = (1u << kGenerationTagBits) - 1;
// Set in the live tag of a registered slot; a dropped slot's live tag is 0, matching no holder.
inline constexpr uint16_t kLiveTagBit = 0x8000;

struct Holder {
  uint16_t slot = 0;
  uint16_t generation_tag : kGenerationTagBits = 0;
  uint16_t tiers : kTierCount = 0;  // bit i set: held in Tier(i); never 0 in a list
};
static_assert(sizeof(Holder) == 4);

// Sorted by slot, at most one holder per slot.
using HolderList = absl::InlinedVector<Holder, 4>;

// The live tag a current holder of `holder.slot` has.
inline uint16_t LiveTagOf(const Holder& holder) { return kLiveTagBit | holder.generation_tag; }

// The fastest tier in a non-empty tier set.
inline Tier FastestTier(uint16_t tiers) { return static_cast<Tier>(std::countr_zero(tiers)); }

// Whether two lists hold the same holders with the same generation tags and tiers.
inline bool SameHolders(const HolderList& a, const HolderList& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return false;
  }
  return true;
}

// Removes the holders whose tag is not their slot's live tag (`live_tags` is indexed by slot).
// Returns how many were removed.
size_t PurgeStale(HolderList& list, std::span<const uint16_t> live_tags);

// Adds `tier` to the holder of `slot`, creating it (with `generation_tag`) when the slot holds
// the chunk in no tier yet. Every holder in `list` must be current (PurgeStale first). Returns
// true when a holder was created.
bool AddTier(HolderList& list, uint16_t slot, uint16_t generation_tag, Tier tier);

// Removes `tier` from the holder of `slot`, and the holder when no tier is left. Every holder in
// `list` must be current. Returns true when the holder was removed.
bool RemoveTier(HolderList& list, uint16_t slot, Tier tier);

}  // namespace strata::controller::internal_index
