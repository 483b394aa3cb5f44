#include "controller/index/instance_table.h"

#include "controller/index/holder_list.h"
#include "gtest/gtest.h"

namespace strata::controller::internal_index {
namespace {

TEST(InstanceTableTest, RegisterFindAndErrors) {
  InstanceTable table(2);
  const absl::StatusOr<uint16_t> a = table.Register("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*table.Find("a"), *a);
  EXPECT_EQ(table.instance_id(*a), "a");
  EXPECT_EQ(table.Register("a").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table.Register("").status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(table.Register("b").ok());
  EXPECT_EQ(table.Register("c").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(table.Find("c").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(table.registered(), 2u);
}

TEST(InstanceTableTest, DropFreesTheSlotUnderANewGeneration) {
  InstanceTable table(1);
  const uint16_t slot = *table.Register("a");
  const uint16_t old_tag = table.live_tags()[slot];
  table.AddLiveEntries(slot, 3);
  EXPECT_EQ(table.Drop(slot), 3u);
  EXPECT_EQ(table.live_tags()[slot], 0);
  EXPECT_FALSE(table.Find("a").ok());
  // The freed slot is reused, by the same id or another, under a tag the old holders lack.
  EXPECT_EQ(*table.Register("a"), slot);
  EXPECT_NE(table.live_tags()[slot], old_tag);
}

TEST(InstanceTableTest, ClearKeepsTheInstanceUnderANewGeneration) {
  InstanceTable table(4);
  const uint16_t slot = *table.Register("a");
  const uint16_t old_tag = table.live_tags()[slot];
  table.AddLiveEntries(slot, 2);
  EXPECT_EQ(table.Clear(slot), 2u);
  EXPECT_EQ(*table.Find("a"), slot);
  EXPECT_NE(table.live_tags()[slot], old_tag);
  EXPECT_EQ(table.live_tags()[slot], kLiveTagBit | table.generation_tag(slot));
}

TEST(InstanceTableTest, GenerationWindowFillsUntilASweepPassRaisesTheFloor) {
  InstanceTable table(1);
  const uint16_t slot = *table.Register("a");
  for (uint32_t i = 0; i < kGenerationTagMask; ++i) {
    ASSERT_FALSE(table.GenerationWindowFull(slot)) << i;
    table.Clear(slot);
  }
  EXPECT_TRUE(table.GenerationWindowFull(slot));
  table.BeginSweepPass();
  EXPECT_TRUE(table.GenerationWindowFull(slot));  // the pass has not visited everything yet
  table.EndSweepPass();
  EXPECT_FALSE(table.GenerationWindowFull(slot));
}

}  // namespace
}  // namespace strata::controller::internal_index
