#include "controller/index/chunk_table.h"

#include <map>
#include <random>

#include "gtest/gtest.h"

namespace strata::controller::internal_index {
namespace {

// Marks a list with `value` as its only holder's slot.
void Mark(HolderList& list, uint16_t value) {
  list.clear();
  AddTier(list, value, 0, Tier::kHost);
}
uint16_t MarkOf(const HolderList& list) { return list.front().slot; }

// Compares the table with a model of it, key by key.
void ExpectSame(const ChunkTable& table, const std::map<uint64_t, uint16_t>& model) {
  ASSERT_EQ(table.size(), model.size());
  for (const auto& [key, value] : model) {
    const HolderList* list = table.Find(key);
    ASSERT_NE(list, nullptr) << key;
    ASSERT_EQ(MarkOf(*list), value) << key;
  }
}

TEST(ChunkTableTest, EmptyTableFindsNothing) {
  ChunkTable table;
  EXPECT_EQ(table.Find(42), nullptr);
  table.Erase(42);
  table.Prefetch(42);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.MemoryBytes(), 0u);
}

TEST(ChunkTableTest, InsertsFindsAndStaysUnderThreeQuartersFull) {
  ChunkTable table;
  for (uint64_t key = 1; key <= 1000; ++key)
    Mark(table.FindOrInsert(key * 0x9E3779B97F4A7C15ull), key % 7);
  EXPECT_EQ(table.size(), 1000u);
  EXPECT_LE(table.size() * 4, table.capacity() * 3);
  for (uint64_t key = 1; key <= 1000; ++key) {
    const HolderList* list = table.Find(key * 0x9E3779B97F4A7C15ull);
    ASSERT_NE(list, nullptr);
    EXPECT_EQ(MarkOf(*list), key % 7);
  }
  EXPECT_EQ(table.Find(12345), nullptr);
  // Inserting a present key finds it.
  EXPECT_EQ(MarkOf(table.FindOrInsert(0x9E3779B97F4A7C15ull)), 1);
  EXPECT_EQ(table.size(), 1000u);
}

TEST(ChunkTableTest, RandomOperationsMatchAModel) {
  // Keys crowded onto few probe starts (and around the table's end) so that runs are long and
  // wrap, exercising the backward shift of Erase.
  std::mt19937_64 rng(3);
  ChunkTable table;
  std::map<uint64_t, uint16_t> model;
  for (int step = 0; step < 20000; ++step) {
    const uint64_t key = (rng() % 64) << 32 | (rng() % 4 == 0 ? 0 : 60 + rng() % 8);
    if (key == 0) continue;
    if (rng() % 3 == 0) {
      table.Erase(key);
      model.erase(key);
    } else {
      const uint16_t value = static_cast<uint16_t>(rng());
      Mark(table.FindOrInsert(key), value);
      model[key] = value;
    }
    if (step % 1000 == 0) ExpectSame(table, model);
  }
  ExpectSame(table, model);
}

TEST(ChunkTableTest, EraseIfVisitsEveryEntryAndErasesTheChosenOnes) {
  std::mt19937_64 rng(4);
  ChunkTable table;
  std::map<uint64_t, uint16_t> model;
  for (int i = 0; i < 5000; ++i) {
    const uint64_t key = rng() | 1;
    const uint16_t value = static_cast<uint16_t>(i);
    Mark(table.FindOrInsert(key), value);
    model[key] = value;
  }
  table.EraseIf([](HolderList& list) { return MarkOf(list) % 2 == 0; });
  std::erase_if(model, [](const auto& entry) { return entry.second % 2 == 0; });
  ExpectSame(table, model);
}

TEST(ChunkTableTest, ShrinkToFitGivesMemoryBack) {
  ChunkTable table;
  for (uint64_t key = 1; key <= 4096; ++key) Mark(table.FindOrInsert(key), 1);
  const size_t full = table.MemoryBytes();
  for (uint64_t key = 1; key <= 4000; ++key) table.Erase(key);
  table.ShrinkToFit();
  EXPECT_LT(table.MemoryBytes(), full / 16);
  for (uint64_t key = 4001; key <= 4096; ++key) ASSERT_NE(table.Find(key), nullptr);
  table.EraseIf([](HolderList&) { return true; });
  table.ShrinkToFit();
  EXPECT_EQ(table.MemoryBytes(), 0u);
  EXPECT_EQ(table.Find(4096), nullptr);
}

}  // namespace
}  // namespace strata::controller::internal_index
