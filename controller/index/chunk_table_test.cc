#include "controller/index/chunk_table.h"

#include <map>
#include <random>

#include "gtest/gtest.h"

namespace strata::controller::internal_index {
namespace {

// Reader-side lookup: the holder word of `key`, 0 when absent.
uint64_t ReadWord(const ChunkTable& table, uint64_t key) {
  uint64_t word = 0;
  table.Read(key, [&](uint64_t w) { word = w; });
  return word;
}

// Writer-side upsert of `key`'s word.
void Put(ChunkTable& table, TableMemory& memory, uint64_t key, uint64_t word) {
  size_t index = table.Find(key);
  if (index == ChunkTable::kNone) {
    table.ReserveOneMore(memory);
    table.BeginWrite();
    table.Insert(key, word);
  } else {
    table.BeginWrite();
    table.SetHolders(index, word);
  }
  table.EndWrite();
}

void Erase(ChunkTable& table, uint64_t key) {
  const size_t index = table.Find(key);
  if (index != ChunkTable::kNone) table.EraseAt(index);
}

// Compares the table with a model of it, key by key, from both sides.
void ExpectSame(const ChunkTable& table, const std::map<uint64_t, uint64_t>& model) {
  ASSERT_EQ(table.size(), model.size());
  for (const auto& [key, word] : model) {
    const size_t index = table.Find(key);
    ASSERT_NE(index, ChunkTable::kNone) << key;
    ASSERT_EQ(table.holders(index), word) << key;
    ASSERT_EQ(ReadWord(table, key), word) << key;
  }
}

TEST(ChunkTableTest, EmptyTableFindsNothing) {
  ChunkTable table;
  EXPECT_EQ(table.Find(42), ChunkTable::kNone);
  EXPECT_EQ(ReadWord(table, 42), 0u);
  table.Prefetch(42);
  EXPECT_EQ(table.size(), 0u);
  EXPECT_EQ(table.capacity(), 0u);
}

TEST(ChunkTableTest, InsertsFindsAndStaysUnderThreeQuartersFull) {
  TableMemory memory;
  ChunkTable table;
  for (uint64_t key = 1; key <= 1000; ++key) Put(table, memory, key * 0x9E3779B97F4A7C15ull, key);
  EXPECT_EQ(table.size(), 1000u);
  EXPECT_LE(table.size() * 4, table.capacity() * 3);
  EXPECT_EQ(memory.allocated_bytes(), table.capacity() * 16);  // the old arrays went back
  for (uint64_t key = 1; key <= 1000; ++key) {
    EXPECT_EQ(ReadWord(table, key * 0x9E3779B97F4A7C15ull), key);
  }
  EXPECT_EQ(ReadWord(table, 12345), 0u);
  EXPECT_EQ(table.Find(12345), ChunkTable::kNone);
}

TEST(ChunkTableTest, RandomOperationsMatchAModel) {
  // Keys crowded onto few probe starts (and around the table's end) so that runs are long and
  // wrap, exercising the backward shift of EraseAt.
  std::mt19937_64 rng(3);
  TableMemory memory;
  ChunkTable table;
  std::map<uint64_t, uint64_t> model;
  for (int step = 0; step < 20000; ++step) {
    const uint64_t key = (rng() % 64) << 32 | (rng() % 4 == 0 ? 0 : 250 + rng() % 8);
    if (key == 0) continue;
    if (rng() % 3 == 0) {
      Erase(table, key);
      model.erase(key);
    } else {
      const uint64_t word = rng() | 1;
      Put(table, memory, key, word);
      model[key] = word;
    }
    if (step % 1000 == 0) ExpectSame(table, model);
  }
  ExpectSame(table, model);
}

TEST(ChunkTableTest, EraseIfVisitsEveryEntryAndErasesTheChosenOnes) {
  std::mt19937_64 rng(4);
  TableMemory memory;
  ChunkTable table;
  std::map<uint64_t, uint64_t> model;
  for (uint64_t i = 1; i <= 5000; ++i) {
    const uint64_t key = rng() | 1;
    Put(table, memory, key, i);
    model[key] = i;
  }
  table.EraseIf([&](size_t index) { return table.holders(index) % 2 == 0; });
  std::erase_if(model, [](const auto& entry) { return entry.second % 2 == 0; });
  ExpectSame(table, model);
}

TEST(ChunkTableTest, ShrinkToFitGivesMemoryBack) {
  TableMemory memory;
  ChunkTable table;
  for (uint64_t key = 1; key <= 16384; ++key) Put(table, memory, key, 1);
  const size_t full = memory.allocated_bytes();
  for (uint64_t key = 1; key <= 16000; ++key) Erase(table, key);
  table.ShrinkToFit(memory);
  EXPECT_LT(memory.allocated_bytes(), full / 16);
  for (uint64_t key = 16001; key <= 16384; ++key) ASSERT_EQ(ReadWord(table, key), 1u);
  table.EraseIf([](size_t) { return true; });
  table.ShrinkToFit(memory);
  EXPECT_EQ(memory.allocated_bytes(), 0u);
  EXPECT_EQ(ReadWord(table, 16384), 0u);
}

}  // namespace
}  // namespace strata::controller::internal_index
