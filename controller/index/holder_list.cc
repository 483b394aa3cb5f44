#include "controller/index/holder_list.h"

#include <algorithm>

namespace strata::controller::internal_index {
namespace {

HolderList::iterator LowerBound(HolderList& list, uint16_t slot) {
  return std::lower_bound(list.begin(), list.end(), slot,
                          [](const Holder& h, uint16_t s) { return h.slot < s; });
}

uint16_t TierBit(Tier tier) { return static_cast<uint16_t>(1u << static_cast<unsigned>(tier)); }

}  // namespace

size_t PurgeStale(HolderList& list, std::span<const uint16_t> live_tags) {
  const auto stale = [&](const Holder& h) { return LiveTagOf(h) != live_tags[h.slot]; };
  const auto first = std::remove_if(list.begin(), list.end(), stale);
  const size_t removed = static_cast<size_t>(list.end() - first);
  list.erase(first, list.end());
  return removed;
}

bool AddTier(HolderList& list, uint16_t slot, uint16_t generation_tag, Tier tier) {
  const auto it = LowerBound(list, slot);
  if (it != list.end() && it->slot == slot) {
    it->tiers |= TierBit(tier);
    return false;
  }
  Holder holder;
  holder.slot = slot;
  holder.generation_tag = generation_tag & kGenerationTagMask;
  holder.tiers = TierBit(tier);
  list.insert(it, holder);
  return true;
}

bool RemoveTier(HolderList& list, uint16_t slot, Tier tier) {
  const auto it = LowerBound(list, slot);
  if (it == list.end() || it->slot != slot) return false;
  it->tiers &= ~TierBit(tier);
  if (it->tiers != 0) return false;
  list.erase(it);
  return true;
}

}  // namespace strata::controller::internal_index
