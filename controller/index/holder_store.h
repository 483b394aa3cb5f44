// HolderStore: where the cluster index keeps each chunk's holders (holder_list.h). A chunk's
// table entry (chunk_table.h) has one 64-bit holder word: up to two holders inline in it, which
// covers a chunk held by one or two instances with no other memory (no heap block, no second
// cache miss on lookup); more refer to a block of this store, a power of two of at least four
// holders, carved from 1 MiB slabs of TableMemory.
//
// Word encoding: 0 is no holder. A holder is 32 bits whose tier bits (28-31) are never 0, so a
// word whose bits 28-31 are set holds one holder in its low half and, when its high half is
// non-zero, a second one there (the two sorted by slot). A non-zero word with bits 28-31 clear
// refers to a block: bits 0-4 log2 of its capacity, bits 8-24 the holder count, bits 32-63 the
// block's position in the slabs, in holders.
//
// Thread-safety: one writer at a time (the owner serializes Store and Release); Load may run on
// any thread concurrently with it. Slabs are never freed before the store is destroyed and a
// block's memory is only reused after no entry refers to it, so a reader that loads a word and
// its block inside a ChunkTable::Read of the entry's shard gets them consistent once Read
// returns; the writer changes a block only in a write section of the shard whose entry refers
// to it. Load tolerates torn words (on Read's retried attempts): it reads nothing outside the
// slabs.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "controller/index/holder_list.h"
#include "controller/index/table_memory.h"

namespace strata::controller::internal_index {

class HolderStore {
 public:
  // Slabs come from, and go back at destruction to, `memory`, which must outlive the store.
  explicit HolderStore(TableMemory& memory) : memory_(memory) {}
  HolderStore(const HolderStore&) = delete;
  HolderStore& operator=(const HolderStore&) = delete;
  ~HolderStore();

  // Replaces `list`'s contents with the holders of `word`. Any thread.
  void Load(uint64_t word, HolderList& list) const;
  // Whether `word` holds its holders inline, all current (`live_tags` indexed by slot): the
  // sweep's quick pass over most entries.
  static bool InlineAndCurrent(uint64_t word, std::span<const uint16_t> live_tags);

  // The writer: the word for `list` (sorted by slot, at most one holder per slot). Writes its
  // block when it has more than two holders, into `old_word`'s block when that has the capacity
  // wanted, else into a new block (freeing the old one). Call it inside a write section of the
  // shard whose entry has `old_word` and gets the result.
  uint64_t Store(uint64_t old_word, const HolderList& list);
  // The writer: frees the block of `word`, which no entry refers to any more.
  void Release(uint64_t word);

  // Slab bytes (blocks in use and free).
  size_t MemoryBytes() const;

 private:
  static constexpr uint32_t kSlabHolders = 1u << 18;  // 1 MiB
  static constexpr uint32_t kMaxSlabs = 1u << 14;     // 16 GiB of blocks
  static constexpr uint32_t kMinBlockLog2 = 2;
  static constexpr uint32_t kMaxBlockLog2 = 16;  // 65536 holders: InstanceTable::kMaxInstances
  static constexpr size_t kDirectoryBytes = kMaxSlabs * sizeof(std::atomic<uint32_t*>);

  // A block of 1 << log2 holders at `position`; nullptr when the slab is absent (a torn word).
  uint32_t* BlockAt(uint32_t position, uint32_t log2) const;
  uint32_t Allocate(uint32_t log2);

  TableMemory& memory_;
  // kMaxSlabs slab pointers, allocated from memory_ with the first slab; null before.
  std::atomic<std::atomic<uint32_t*>*> slabs_{nullptr};
  // The writer's own.
  uint32_t slab_count_ = 0;
  uint32_t next_position_ = 0;  // bump allocation in the last slab
  std::vector<std::vector<uint32_t>> free_blocks_ =
      std::vector<std::vector<uint32_t>>(kMaxBlockLog2 + 1);  // by log2 of the capacity
};

}  // namespace strata::controller::internal_index
