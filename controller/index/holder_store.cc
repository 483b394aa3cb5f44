#include "controller/index/holder_store.h"

#include <algorithm>
#include <bit>

#include "core/check.h"

namespace strata::controller::internal_index {
namespace {

constexpr uint64_t kTierBitsMask = 0xf000'0000;

bool IsInline(uint64_t word) { return (word & kTierBitsMask) != 0; }
uint32_t BlockLog2(uint64_t word) { return static_cast<uint32_t>(word & 0x1f); }
uint32_t BlockCount(uint64_t word) { return static_cast<uint32_t>((word >> 8) & 0x1ffff); }
uint32_t BlockPosition(uint64_t word) { return static_cast<uint32_t>(word >> 32); }
uint64_t BlockWord(uint32_t log2, uint32_t count, uint32_t position) {
  return uint64_t{position} << 32 | uint64_t{count} << 8 | log2;
}

uint32_t Bits(const Holder& h) { return std::bit_cast<uint32_t>(h); }
Holder FromBits(uint32_t bits) { return std::bit_cast<Holder>(bits); }

uint32_t LoadAcquire(const uint32_t& bits) {
  return std::atomic_ref<uint32_t>(const_cast<uint32_t&>(bits)).load(std::memory_order_acquire);
}

}  // namespace

HolderStore::~HolderStore() {
  std::atomic<uint32_t*>* const slabs = slabs_.load(std::memory_order_relaxed);
  if (slabs == nullptr) return;
  for (uint32_t s = 0; s < slab_count_; ++s) {
    memory_.Release(slabs[s].load(std::memory_order_relaxed), kSlabHolders * sizeof(uint32_t));
  }
  memory_.Release(slabs, kDirectoryBytes);
}

uint32_t* HolderStore::BlockAt(uint32_t position, uint32_t log2) const {
  std::atomic<uint32_t*>* const slabs = slabs_.load(std::memory_order_acquire);
  const uint32_t slab = position / kSlabHolders;
  const uint32_t offset = position % kSlabHolders;
  if (slabs == nullptr || slab >= kMaxSlabs || offset + (1u << log2) > kSlabHolders) {
    return nullptr;
  }
  uint32_t* const base = slabs[slab].load(std::memory_order_acquire);
  return base == nullptr ? nullptr : base + offset;
}

void HolderStore::Load(uint64_t word, HolderList& list) const {
  list.clear();
  if (word == 0) return;
  if (IsInline(word)) {
    list.push_back(FromBits(static_cast<uint32_t>(word)));
    if ((word >> 32) != 0) list.push_back(FromBits(static_cast<uint32_t>(word >> 32)));
    return;
  }
  const uint32_t log2 = BlockLog2(word);
  const uint32_t count = BlockCount(word);
  if (log2 < kMinBlockLog2 || log2 > kMaxBlockLog2 || count > (1u << log2)) return;
  const uint32_t* const block = BlockAt(BlockPosition(word), log2);
  if (block == nullptr) return;
  list.resize(count);
  for (uint32_t i = 0; i < count; ++i) list[i] = FromBits(LoadAcquire(block[i]));
}

bool HolderStore::InlineAndCurrent(uint64_t word, std::span<const uint16_t> live_tags) {
  if (!IsInline(word)) return false;
  const Holder first = FromBits(static_cast<uint32_t>(word));
  if (LiveTagOf(first) != live_tags[first.slot]) return false;
  if ((word >> 32) == 0) return true;
  const Holder second = FromBits(static_cast<uint32_t>(word >> 32));
  return LiveTagOf(second) == live_tags[second.slot];
}

uint64_t HolderStore::Store(uint64_t old_word, const HolderList& list) {
  if (list.size() <= 2) {
    Release(old_word);
    if (list.empty()) return 0;
    const uint64_t second = list.size() == 2 ? Bits(list[1]) : 0;
    return second << 32 | Bits(list[0]);
  }
  const auto count = static_cast<uint32_t>(list.size());
  const uint32_t log2 = std::max(kMinBlockLog2, static_cast<uint32_t>(std::bit_width(count - 1)));
  STRATA_CHECK(log2 <= kMaxBlockLog2);
  uint32_t position;
  if (old_word != 0 && !IsInline(old_word) && BlockLog2(old_word) == log2) {
    position = BlockPosition(old_word);
  } else {
    Release(old_word);
    position = Allocate(log2);
  }
  uint32_t* const block = BlockAt(position, log2);
  for (uint32_t i = 0; i < count; ++i) {
    std::atomic_ref<uint32_t>(block[i]).store(Bits(list[i]), std::memory_order_release);
  }
  return BlockWord(log2, count, position);
}

void HolderStore::Release(uint64_t word) {
  if (word == 0 || IsInline(word)) return;
  free_blocks_[BlockLog2(word)].push_back(BlockPosition(word));
}

uint32_t HolderStore::Allocate(uint32_t log2) {
  std::vector<uint32_t>& free = free_blocks_[log2];
  if (!free.empty()) {
    const uint32_t position = free.back();
    free.pop_back();
    return position;
  }
  const uint32_t holders = 1u << log2;
  // Blocks are bumped in the last slab, each aligned to its size (the gap is given to the free
  // lists of smaller blocks); a block that does not fit starts a new slab.
  const auto carve_gap = [&](uint32_t to) {
    while (next_position_ < to) {
      // The largest block aligned at next_position_ that fits (positions are multiples of 4).
      const uint32_t piece_log2 =
          std::min({kMaxBlockLog2, static_cast<uint32_t>(std::countr_zero(next_position_)),
                    static_cast<uint32_t>(std::bit_width(to - next_position_)) - 1});
      free_blocks_[piece_log2].push_back(next_position_);
      next_position_ += 1u << piece_log2;
    }
  };
  std::atomic<uint32_t*>* slabs = slabs_.load(std::memory_order_relaxed);
  const uint32_t aligned = (next_position_ + holders - 1) & ~(holders - 1);
  if (slabs == nullptr || aligned + holders > slab_count_ * kSlabHolders) {
    if (slabs == nullptr) {
      slabs = static_cast<std::atomic<uint32_t*>*>(memory_.Allocate(kDirectoryBytes));
      slabs_.store(slabs, std::memory_order_release);
    }
    STRATA_CHECK(slab_count_ < kMaxSlabs);
    carve_gap(slab_count_ * kSlabHolders);
    auto* const slab = static_cast<uint32_t*>(memory_.Allocate(kSlabHolders * sizeof(uint32_t)));
    slabs[slab_count_].store(slab, std::memory_order_release);
    next_position_ = slab_count_ * kSlabHolders;
    ++slab_count_;
  } else {
    carve_gap(aligned);
  }
  const uint32_t position = next_position_;
  next_position_ += holders;
  return position;
}

size_t HolderStore::MemoryBytes() const {
  return slab_count_ == 0 ? 0 : kDirectoryBytes + size_t{slab_count_} * kSlabHolders * 4;
}

}  // namespace strata::controller::internal_index
