// ChunkTable: one shard of the cluster index's hash table, from a chunk's index key to its
// HolderList. Open addressing with linear probing over 32-byte entries (the key and the inline
// holder list), at most 3/4 full. Index keys are uniformly distributed hashes, so a key's probe
// starts where its low bits say (at the start of a cache line): the line a lookup reads first is
// known before it starts, and the chain lookup prefetches it many chunks ahead so that the cache
// misses overlap. Large tables sit on huge pages (huge_page_array.h). Erasure shifts the probe run
// back (no tombstones). Key 0 marks an empty entry and is never stored (ClusterIndex::IndexKey
// maps it to 1).
//
// Thread-compatible: the owner (ClusterIndex) serializes writers against readers. Pointers to
// holder lists stay valid until the next FindOrInsert, Erase, EraseIf or ShrinkToFit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "controller/index/holder_list.h"
#include "controller/index/huge_page_array.h"
#include "core/check.h"

namespace strata::controller::internal_index {

class ChunkTable {
 public:
  struct Entry {
    uint64_t key = 0;  // 0: empty
    HolderList holders;
  };

  // The holders of `key` (non-zero), or nullptr.
  const HolderList* Find(uint64_t key) const {
    const size_t i = FindIndex(key);
    return i < entries_.size() ? &entries_[i].holders : nullptr;
  }
  HolderList* Find(uint64_t key) {
    const size_t i = FindIndex(key);
    return i < entries_.size() ? &entries_[i].holders : nullptr;
  }
  // The holders of `key` (non-zero), an empty list inserted when it had none. May grow the table.
  HolderList& FindOrInsert(uint64_t key);
  // Removes `key`'s entry, if any.
  void Erase(uint64_t key);
  // Calls `visit` on every entry's holders once or more (an entry may be visited again when an
  // erasure moves it) and erases the entries for which it returns true.
  void EraseIf(absl::FunctionRef<bool(HolderList&)> visit);
  // Reallocates to the smallest capacity that holds size() within the load limit.
  void ShrinkToFit();

  // Brings the cache line `key`'s probe reads first (two entries) toward the core. Measured on the
  // 100 x 1M bench: prefetching the next line too made lookups about 1.7x slower (twice the lines
  // in flight, for the minority of probes that go on).
  void Prefetch(uint64_t key) const {
    if (entries_.empty()) return;
    const size_t home = Home(key);
    __builtin_prefetch(&entries_[home]);
  }

  size_t size() const { return size_; }
  size_t capacity() const { return entries_.size(); }
  // Bytes of the entry array (holder lists' heap blocks are not counted).
  size_t MemoryBytes() const { return entries_.MemoryBytes(); }

 private:
  // Where `key`'s probe starts: the first entry of a cache line (entries are 32 bytes, arrays
  // 64-byte aligned), picked by the key's low bits.
  size_t Home(uint64_t key) const { return key & mask_ & ~size_t{1}; }
  // The index of `key`'s entry; capacity() when absent.
  size_t FindIndex(uint64_t key) const {
    STRATA_DCHECK(key != 0);
    if (entries_.empty()) return 0;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      if (entries_[i].key == key) return i;
      if (entries_[i].key == 0) return entries_.size();
    }
  }
  void EraseAt(size_t index);
  void Rehash(size_t capacity);

  HugePageArray<Entry> entries_;  // a power of two in size, or empty
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace strata::controller::internal_index
