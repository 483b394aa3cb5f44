#include "storage/tiered/importance_book.h"

#include <cmath>
#include <limits>
#include <span>
#include <vector>

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

ChunkKey Key(uint8_t id) {
  uint8_t digest[16] = {id};
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPositionIndependent, 7,
                             digest);
}

TEST(ImportanceBookTest, ReportsOfAChunkAreSummedAndANewLengthStartsAfresh) {
  ImportanceBook book;
  EXPECT_FALSE(book.Find(Key(1)).has_value());
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>{1, 0, 2}).ok());
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>{0.5f, 3, 0}).ok());
  EXPECT_EQ(*book.Find(Key(1)), (std::vector<float>{1.5f, 3, 2}));
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>{4, 4}).ok());
  EXPECT_EQ(*book.Find(Key(1)), (std::vector<float>{4, 4}));
  EXPECT_EQ(book.size(), 1u);
}

TEST(ImportanceBookTest, SumsSaturateAtTheLargestFloatAndStayFinite) {
  ImportanceBook book;
  const float max = std::numeric_limits<float>::max();
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>{max, 1, max / 2}).ok());
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>{max, 2, max / 2}).ok());
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>{1, 0, max}).ok());
  const std::vector<float> held = *book.Find(Key(1));
  EXPECT_EQ(held, (std::vector<float>{max, 3, max}));
  for (const float value : held) EXPECT_TRUE(std::isfinite(value));
}

TEST(ImportanceBookTest, AddAllKeepsEveryReportOrNone) {
  ImportanceBook book;
  const std::vector<float> good = {1, 2}, bad = {1, -1};
  const std::vector<ChunkKey> keys = {Key(1), Key(2)};
  const std::span<const float> one_bad[] = {good, bad};
  EXPECT_EQ(book.AddAll(keys, one_bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(book.size(), 0u) << "the good report before the bad one was not kept either";
  const std::span<const float> one[] = {good};
  EXPECT_EQ(book.AddAll(keys, one).code(), absl::StatusCode::kInvalidArgument);
  const std::span<const float> both[] = {good, good};
  ASSERT_TRUE(book.AddAll(keys, both).ok());
  EXPECT_EQ(*book.Find(Key(1)), good);
  EXPECT_EQ(*book.Find(Key(2)), good);
}

TEST(ImportanceBookTest, BadReportsAreRefusedAndChangeNothing) {
  ImportanceBook book;
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>{1, 1}).ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::vector<float>& bad : {std::vector<float>{}, std::vector<float>{1, -1},
                                        std::vector<float>{nan, 1}, std::vector<float>{1, inf}}) {
    EXPECT_EQ(book.Add(Key(1), bad).code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(book.Add(ChunkKey(), std::vector<float>{1}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(book.Add(Key(2), std::vector<float>(ImportanceBook::kMaxTokens + 1, 1.0f)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*book.Find(Key(1)), (std::vector<float>{1, 1}));
  EXPECT_EQ(book.size(), 1u);
}

TEST(ImportanceBookTest, PastItsBoundTheChunkReportedLeastRecentlyIsForgotten) {
  ImportanceBook book(/*max_chunks=*/2);
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>{1}).ok());
  ASSERT_TRUE(book.Add(Key(2), std::vector<float>{2}).ok());
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>{1}).ok());  // 1 is the most recent now
  ASSERT_TRUE(book.Add(Key(3), std::vector<float>{3}).ok());
  EXPECT_EQ(book.size(), 2u);
  EXPECT_FALSE(book.Find(Key(2)).has_value());
  EXPECT_EQ(*book.Find(Key(1)), std::vector<float>{2});
  EXPECT_EQ(*book.Find(Key(3)), std::vector<float>{3});
}

TEST(ImportanceBookTest, PastItsValueBoundTheLeastRecentlyReportedGo) {
  ImportanceBook book(/*max_chunks=*/100, /*max_values=*/10);
  ASSERT_TRUE(book.Add(Key(1), std::vector<float>(4, 1)).ok());
  ASSERT_TRUE(book.Add(Key(2), std::vector<float>(4, 1)).ok());
  ASSERT_TRUE(book.Add(Key(3), std::vector<float>(4, 1)).ok());  // 12 values: 1 goes
  EXPECT_FALSE(book.Find(Key(1)).has_value());
  EXPECT_EQ(book.values(), 8u);
  ASSERT_TRUE(book.Add(Key(2), std::vector<float>(2, 1)).ok());  // a new length: 6 values
  EXPECT_EQ(book.values(), 6u);
  ASSERT_TRUE(book.Add(Key(4), std::vector<float>(11, 1)).ok());  // over the bound by itself
  EXPECT_EQ(book.size(), 0u) << "kept nothing past the bound, itself included";
  EXPECT_EQ(book.values(), 0u);
}

}  // namespace
}  // namespace strata::storage
