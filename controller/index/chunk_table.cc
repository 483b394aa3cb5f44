#include "controller/index/chunk_table.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "core/check.h"

namespace strata::controller::internal_index {
namespace {

constexpr size_t kMinCapacity = 8;

// At most 3/4 full: probe runs stay short (about 2.5 entries on a hit at the limit).
bool OverLoad(size_t size, size_t capacity) { return size * 4 > capacity * 3; }

}  // namespace

HolderList& ChunkTable::FindOrInsert(uint64_t key) {
  STRATA_DCHECK(key != 0);
  if (OverLoad(size_ + 1, entries_.size())) {
    Rehash(std::max(kMinCapacity, entries_.size() * 2));
  }
  size_t i = Home(key);
  for (; entries_[i].key != 0; i = (i + 1) & mask_) {
    if (entries_[i].key == key) return entries_[i].holders;
  }
  entries_[i].key = key;
  ++size_;
  return entries_[i].holders;
}

void ChunkTable::Erase(uint64_t key) {
  const size_t i = FindIndex(key);
  if (i < entries_.size()) EraseAt(i);
}

void ChunkTable::EraseAt(size_t hole) {
  // Backward shift: move each later entry of the run into the hole unless its probe starts
  // after the hole (cyclically), so that every remaining entry stays reachable from its start.
  for (size_t j = (hole + 1) & mask_; entries_[j].key != 0; j = (j + 1) & mask_) {
    const size_t home = Home(entries_[j].key);
    if (((j - home) & mask_) >= ((j - hole) & mask_)) {
      entries_[hole] = std::move(entries_[j]);
      hole = j;
    }
  }
  entries_[hole].key = 0;
  entries_[hole].holders.clear();
  entries_[hole].holders.shrink_to_fit();  // frees a spilled list's heap block
  --size_;
}

void ChunkTable::EraseIf(absl::FunctionRef<bool(HolderList&)> visit) {
  for (size_t i = 0; i < entries_.size();) {
    // An erasure may move a later entry into `i`: look at it again.
    if (entries_[i].key != 0 && visit(entries_[i].holders)) {
      EraseAt(i);
    } else {
      ++i;
    }
  }
}

void ChunkTable::ShrinkToFit() {
  if (size_ == 0) {
    entries_ = HugePageArray<Entry>();
    mask_ = 0;
    return;
  }
  size_t capacity = kMinCapacity;
  while (OverLoad(size_, capacity)) capacity *= 2;
  if (capacity < entries_.size()) Rehash(capacity);
}

void ChunkTable::Rehash(size_t capacity) {
  STRATA_DCHECK(std::has_single_bit(capacity) && !OverLoad(size_, capacity));
  HugePageArray<Entry> old = std::exchange(entries_, HugePageArray<Entry>(capacity));
  mask_ = capacity - 1;
  for (Entry& entry : old) {
    if (entry.key == 0) continue;
    size_t i = Home(entry.key);
    while (entries_[i].key != 0) i = (i + 1) & mask_;
    entries_[i] = std::move(entry);
  }
}

}  // namespace strata::controller::internal_index
