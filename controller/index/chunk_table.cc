#include "controller/index/chunk_table.h"

#include <algorithm>
#include <bit>

namespace strata::controller::internal_index {
namespace {

constexpr size_t kEntryBytes = 16;
constexpr size_t kMinCapacity = TableMemory::kMinBlockBytes / kEntryBytes;

// At most 3/4 full: probe runs stay short (about 2.5 entries on a hit at the limit).
bool OverLoad(size_t size, size_t capacity) { return size * 4 > capacity * 3; }

}  // namespace

uint64_t ChunkTable::LoadWord(uint64_t key) const {
  const Layout layout = LoadLayout();
  if (layout.entries == nullptr) return 0;
  size_t i = Home(key, layout.mask);
  for (size_t probes = 0; probes <= layout.mask; ++probes, i = (i + 1) & layout.mask) {
    const uint64_t k = Load(layout.entries[i].key);
    if (k == key) return Load(layout.entries[i].holders);
    if (k == 0) return 0;
  }
  return 0;
}

size_t ChunkTable::Find(uint64_t key) const {
  STRATA_DCHECK(key != 0);
  const Layout layout = LoadLayout();
  if (layout.entries == nullptr) return kNone;
  for (size_t i = Home(key, layout.mask);; i = (i + 1) & layout.mask) {
    if (layout.entries[i].key == key) return i;
    if (layout.entries[i].key == 0) return kNone;
  }
}

void ChunkTable::ReserveOneMore(TableMemory& memory) {
  if (OverLoad(size_ + 1, capacity_)) Rehash(std::max(kMinCapacity, capacity_ * 2), memory);
}

void ChunkTable::Insert(uint64_t key, uint64_t holders) {
  STRATA_DCHECK(key != 0 && !OverLoad(size_ + 1, capacity_));
  const Layout layout = LoadLayout();
  size_t i = Home(key, layout.mask);
  while (layout.entries[i].key != 0) i = (i + 1) & layout.mask;
  Store(layout.entries[i].holders, holders);
  Store(layout.entries[i].key, key);
  ++size_;
}

void ChunkTable::SetHolders(size_t index, uint64_t holders) {
  Store(LoadLayout().entries[index].holders, holders);
}

void ChunkTable::EraseAt(size_t hole) {
  const Layout layout = LoadLayout();
  Entry* const entries = layout.entries;
  const size_t mask = layout.mask;
  BeginWrite();
  // Backward shift: move each later entry of the run into the hole unless its probe starts
  // after the hole (cyclically), so that every remaining entry stays reachable from its start.
  for (size_t j = (hole + 1) & mask; entries[j].key != 0; j = (j + 1) & mask) {
    const size_t home = Home(entries[j].key, mask);
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      Store(entries[hole].holders, entries[j].holders);
      Store(entries[hole].key, entries[j].key);
      hole = j;
    }
  }
  Store(entries[hole].key, 0);
  Store(entries[hole].holders, 0);
  EndWrite();
  --size_;
}

void ChunkTable::EraseIf(absl::FunctionRef<bool(size_t)> visit) {
  for (size_t i = 0; i < capacity_;) {
    // An erasure may move a later entry into `i`: look at it again.
    if (LoadLayout().entries[i].key != 0 && visit(i)) {
      EraseAt(i);
    } else {
      ++i;
    }
  }
}

void ChunkTable::ShrinkToFit(TableMemory& memory) {
  if (size_ == 0) {
    if (capacity_ == 0) return;
    const Layout old = LoadLayout();
    BeginWrite();
    layout_.store(0, std::memory_order_release);
    EndWrite();
    memory.Release(old.entries, capacity_ * kEntryBytes);
    capacity_ = 0;
    return;
  }
  size_t capacity = kMinCapacity;
  while (OverLoad(size_, capacity)) capacity *= 2;
  if (capacity < capacity_) Rehash(capacity, memory);
}

void ChunkTable::Rehash(size_t capacity, TableMemory& memory) {
  STRATA_DCHECK(std::has_single_bit(capacity) && !OverLoad(size_, capacity));
  auto* const fresh = static_cast<Entry*>(memory.Allocate(capacity * kEntryBytes));
  const size_t mask = capacity - 1;
  const Layout old = LoadLayout();
  for (size_t j = 0; j < capacity_; ++j) {
    const Entry& entry = old.entries[j];
    if (entry.key == 0) continue;
    size_t i = Home(entry.key, mask);
    while (fresh[i].key != 0) i = (i + 1) & mask;
    Store(fresh[i].holders, entry.holders);
    Store(fresh[i].key, entry.key);
  }
  BeginWrite();
  layout_.store(
      reinterpret_cast<uintptr_t>(fresh) | static_cast<uintptr_t>(std::countr_zero(capacity)),
      std::memory_order_release);
  EndWrite();
  if (old.entries != nullptr) memory.Release(old.entries, capacity_ * kEntryBytes);
  capacity_ = capacity;
}

}  // namespace strata::controller::internal_index
