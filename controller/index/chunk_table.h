// ChunkTable: one shard of the cluster index's hash table, from a chunk's index key to its
// 64-bit holder word (holder_store.h). Open addressing with linear probing over 16-byte entries
// (the key and the word), four to a cache line, at most 3/4 full. Index keys are uniformly
// distributed hashes, so a key's probe starts where its low bits say (at the start of a cache
// line): the line a lookup reads first is known before it starts, and the chain lookup prefetches
// it many chunks ahead so that the cache misses overlap. The entry arrays come from TableMemory
// (huge pages from 2 MiB). Erasure shifts the probe run back (no tombstones). Key 0 marks an
// empty entry and is never stored (ClusterIndex::IndexKey maps it to 1).
//
// Thread-safety: one writer at a time (the owner serializes them) and any number of readers
// concurrently with it, without locks. A sequence counter (a seqlock) is odd while the writer
// changes the table: every change happens between BeginWrite and EndWrite, except growth and
// shrinking, which fill a new array aside and publish it between their own BeginWrite and
// EndWrite. Read retries until it saw no change, so a reader never waits for more than one
// change (a few entries moved), and sees each key's word as it was before or after each change.
// Every access to the table's memory is atomic (release stores, acquire loads, plain moves on
// x86), since readers may read any of it, including a released array that TableMemory handed
// out again.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "controller/index/table_memory.h"
#include "core/check.h"

namespace strata::controller::internal_index {

class alignas(64) ChunkTable {
 public:
  static constexpr size_t kNone = SIZE_MAX;

  ChunkTable() = default;
  ChunkTable(const ChunkTable&) = delete;
  ChunkTable& operator=(const ChunkTable&) = delete;

  // --- Readers: any thread, concurrently with the writer.

  // Brings the cache line `key`'s probe reads first (four entries) toward the core. Measured on
  // the 100 x 1M bench: prefetching the next line too made lookups about 1.7x slower (twice the
  // lines in flight, for the minority of probes that go on).
  void Prefetch(uint64_t key) const {
    const Layout layout = LoadLayout();
    if (layout.entries != nullptr) __builtin_prefetch(&layout.entries[Home(key, layout.mask)]);
  }

  // Calls `copy(word)` with `key`'s holder word (0 when absent) until no change of the table
  // overlapped the call, so that what `copy` last copied out of the word (and what it refers
  // to) is consistent. `copy` may see torn values on the attempts that are retried: it must
  // bound every access by them, and do nothing else.
  template <typename Copy>
  void Read(uint64_t key, Copy&& copy) const {
    for (;;) {
      const uint64_t begin = seq_.load(std::memory_order_acquire);
      if ((begin & 1) == 0) {
        copy(LoadWord(key));  // acquire loads: the check below cannot move before them
        if (seq_.load(std::memory_order_relaxed) == begin) return;
      }
      __builtin_ia32_pause();
    }
  }

  // --- The writer: one thread at a time.

  // The index of `key`'s entry (key non-zero), or kNone.
  size_t Find(uint64_t key) const;
  // The holder word of the entry at `index`.
  uint64_t holders(size_t index) const { return LoadLayout().entries[index].holders; }
  // Grows the table, when needed, so that one more key fits within the load limit. Indices
  // returned before are invalid afterwards.
  void ReserveOneMore(TableMemory& memory);

  // Changes happen between these two: the counter is odd in between.
  // (Without fences, which TSan does not model: the table's stores are release stores, so a
  // reader that loads one (acquire) also sees the odd counter stored before it.)
  void BeginWrite() {
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void EndWrite() {
    seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  // In a write section: inserts the absent `key` with `holders` (ReserveOneMore first).
  void Insert(uint64_t key, uint64_t holders);
  // In a write section: sets the holder word of the entry at `index`.
  void SetHolders(size_t index, uint64_t holders);
  // In its own write section: removes the entry at `index`. Entries may move.
  void EraseAt(size_t index);

  // Calls `visit` on every entry's index once or more (an entry may be visited again when an
  // erasure moves it) and erases, each in its own write section, the entries for which it
  // returns true. `visit` may change the entry in write sections of its own.
  void EraseIf(absl::FunctionRef<bool(size_t index)> visit);
  // Reallocates to the smallest capacity that holds size() within the load limit (none when
  // empty).
  void ShrinkToFit(TableMemory& memory);

  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    uint64_t key = 0;  // 0: empty
    uint64_t holders = 0;
  };
  // The entry array and its mask (capacity - 1), packed in one word so that a reader loads a
  // matching pair: arrays are page-aligned, so the low 12 bits hold log2(capacity).
  struct Layout {
    Entry* entries = nullptr;
    size_t mask = 0;
  };
  static constexpr uintptr_t kLog2Bits = 0xfff;

  // Where `key`'s probe starts: the first entry of a cache line (entries are 16 bytes, arrays
  // page-aligned), picked by the key's low bits.
  static size_t Home(uint64_t key, size_t mask) { return key & mask & ~size_t{3}; }
  static uint64_t Load(const uint64_t& word) {
    return std::atomic_ref<uint64_t>(const_cast<uint64_t&>(word)).load(std::memory_order_acquire);
  }
  static void Store(uint64_t& word, uint64_t value) {
    std::atomic_ref<uint64_t>(word).store(value, std::memory_order_release);
  }

  Layout LoadLayout() const {
    const uintptr_t packed = layout_.load(std::memory_order_acquire);
    if (packed == 0) return {};
    return {reinterpret_cast<Entry*>(packed & ~kLog2Bits), (size_t{1} << (packed & kLog2Bits)) - 1};
  }
  // A reader's probe: `key`'s holder word, 0 when absent; bounded by the capacity, since a
  // torn view may have no empty entry.
  uint64_t LoadWord(uint64_t key) const;
  void Rehash(size_t capacity, TableMemory& memory);

  std::atomic<uint64_t> seq_{0};
  std::atomic<uintptr_t> layout_{0};  // 0: no array
  // The writer's own.
  size_t capacity_ = 0;  // a power of two, or 0
  size_t size_ = 0;
};

}  // namespace strata::controller::internal_index
