#include "controller/index/holder_store.h"

#include <bit>
#include <random>

#include "gtest/gtest.h"

namespace strata::controller::internal_index {
namespace {

HolderList Holders(uint16_t first_slot, size_t count, Tier tier) {
  HolderList list;
  for (size_t i = 0; i < count; ++i) {
    AddTier(list, static_cast<uint16_t>(first_slot + 2 * i), static_cast<uint16_t>(i), tier);
  }
  return list;
}

HolderList Loaded(const HolderStore& store, uint64_t word) {
  HolderList list;
  store.Load(word, list);
  return list;
}

TEST(HolderStoreTest, NoHolderIsTheZeroWord) {
  TableMemory memory;
  HolderStore store(memory);
  EXPECT_EQ(store.Store(0, {}), 0u);
  EXPECT_TRUE(Loaded(store, 0).empty());
}

TEST(HolderStoreTest, OneOrTwoHoldersAreInlineAndTakeNoMemory) {
  TableMemory memory;
  HolderStore store(memory);
  for (size_t count : {1, 2}) {
    const HolderList list = Holders(7, count, Tier::kDisk);
    const uint64_t word = store.Store(0, list);
    EXPECT_NE(word & 0xf000'0000, 0u);  // the first holder's tier bits mark an inline word
    EXPECT_TRUE(SameHolders(Loaded(store, word), list));
  }
  EXPECT_EQ(store.MemoryBytes(), 0u);
  EXPECT_EQ(memory.allocated_bytes(), 0u);
}

TEST(HolderStoreTest, LargerListsRoundTripThroughBlocks) {
  TableMemory memory;
  HolderStore store(memory);
  uint64_t word = 0;
  for (size_t count : {3, 4, 5, 2, 100, 17, 1, 65536 / 2}) {
    const HolderList list = Holders(0, count, Tier::kHost);
    word = store.Store(word, list);
    ASSERT_TRUE(SameHolders(Loaded(store, word), list)) << count;
  }
  EXPECT_GT(store.MemoryBytes(), 0u);
}

TEST(HolderStoreTest, BlocksAreReusedOnceReleased) {
  TableMemory memory;
  HolderStore store(memory);
  const uint64_t first = store.Store(0, Holders(0, 3, Tier::kHost));
  // Growing within the block's capacity (4) keeps the block.
  const uint64_t grown = store.Store(first, Holders(0, 4, Tier::kHost));
  EXPECT_EQ(grown >> 32, first >> 32);
  // A block no word refers to is handed out again.
  store.Release(grown);
  const uint64_t next = store.Store(0, Holders(1, 3, Tier::kDisk));
  EXPECT_EQ(next >> 32, first >> 32);
  EXPECT_TRUE(SameHolders(Loaded(store, next), Holders(1, 3, Tier::kDisk)));
}

TEST(HolderStoreTest, ManyLiveBlocksKeepTheirContents) {
  std::mt19937_64 rng(5);
  TableMemory memory;
  HolderStore store(memory);
  std::vector<std::pair<uint64_t, HolderList>> live;
  for (int i = 0; i < 20000; ++i) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t k = rng() % live.size();
      store.Release(live[k].first);
      live[k] = live.back();
      live.pop_back();
      continue;
    }
    HolderList list = Holders(static_cast<uint16_t>(rng() % 64), 3 + rng() % 60, Tier::kHost);
    live.emplace_back(store.Store(0, list), std::move(list));
  }
  EXPECT_GT(store.MemoryBytes(), 1u << 20);  // more than one slab
  for (const auto& [word, list] : live) ASSERT_TRUE(SameHolders(Loaded(store, word), list));
}

TEST(HolderStoreTest, TornWordsReadNothingOutsideTheSlabs) {
  TableMemory memory;
  HolderStore store(memory);
  const uint64_t word = store.Store(0, Holders(0, 8, Tier::kHost));
  std::mt19937_64 rng(6);
  HolderList list;
  for (int i = 0; i < 100000; ++i) {
    store.Load(rng() & ~uint64_t{0xf000'0000}, list);  // garbage block words
    store.Load(word ^ (rng() & 0xffff'ffff'0000'0000ull), list);
  }
  SUCCEED();  // the check is that no load above faulted
}

}  // namespace
}  // namespace strata::controller::internal_index
