#include "controller/index/holder_list.h"

#include <vector>

#include "gtest/gtest.h"

namespace strata::controller::internal_index {
namespace {

std::vector<uint16_t> Slots(const HolderList& list) {
  std::vector<uint16_t> slots;
  for (const Holder& h : list) slots.push_back(h.slot);
  return slots;
}

TEST(HolderListTest, AddTierKeepsHoldersSortedAndOnePerSlot) {
  HolderList list;
  EXPECT_TRUE(AddTier(list, 7, 1, Tier::kDisk));
  EXPECT_TRUE(AddTier(list, 2, 1, Tier::kHost));
  EXPECT_TRUE(AddTier(list, 5, 1, Tier::kHost));
  EXPECT_FALSE(AddTier(list, 7, 1, Tier::kHost));
  EXPECT_EQ(Slots(list), (std::vector<uint16_t>{2, 5, 7}));
  EXPECT_EQ(FastestTier(list[2].tiers), Tier::kHost);
}

TEST(HolderListTest, RemoveTierDropsTheHolderWithItsLastTier) {
  HolderList list;
  AddTier(list, 3, 0, Tier::kHost);
  AddTier(list, 3, 0, Tier::kDisk);
  EXPECT_FALSE(RemoveTier(list, 3, Tier::kHost));
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(FastestTier(list[0].tiers), Tier::kDisk);
  EXPECT_FALSE(RemoveTier(list, 4, Tier::kDisk));  // not a holder
  EXPECT_TRUE(RemoveTier(list, 3, Tier::kDisk));
  EXPECT_TRUE(list.empty());
}

TEST(HolderListTest, PurgeStaleRemovesHoldersOfOtherGenerations) {
  HolderList list;
  AddTier(list, 0, 4, Tier::kHost);
  AddTier(list, 1, 9, Tier::kHost);
  AddTier(list, 2, 9, Tier::kHost);
  // Slot 0 is on generation 5 now, slot 1 still on 9, slot 2 is free.
  const std::vector<uint16_t> live_tags = {kLiveTagBit | 5, kLiveTagBit | 9, 0};
  EXPECT_EQ(PurgeStale(list, live_tags), 2u);
  EXPECT_EQ(Slots(list), (std::vector<uint16_t>{1}));
}

TEST(HolderListTest, FastestTierIsTheLowestBit) {
  EXPECT_EQ(FastestTier(0b1111), Tier::kDevice);
  EXPECT_EQ(FastestTier(0b1100), Tier::kDisk);
  EXPECT_EQ(FastestTier(0b1000), Tier::kRemote);
}

}  // namespace
}  // namespace strata::controller::internal_index
