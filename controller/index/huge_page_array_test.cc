#include "controller/index/huge_page_array.h"

#include <cstdint>
#include <string>

#include "gtest/gtest.h"

namespace strata::controller::internal_index {
namespace {

TEST(HugePageArrayTest, SmallArraysAreCacheLineAlignedAndValueInitialized) {
  HugePageArray<std::string> array(100);
  ASSERT_EQ(array.size(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(&array[0]) % 64, 0u);
  for (const std::string& s : array) EXPECT_TRUE(s.empty());
  array[99] = std::string(100, 'x');  // a heap block the destructor must free
  EXPECT_EQ(array.MemoryBytes(), (100 * sizeof(std::string) + 63) / 64 * 64);
}

TEST(HugePageArrayTest, LargeArraysAreHugePageAligned) {
  HugePageArray<uint64_t> array((3u << 20) / sizeof(uint64_t));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(&array[0]) % (2u << 20), 0u);
  EXPECT_EQ(array[12345], 0u);
  EXPECT_EQ(array.MemoryBytes(), 4u << 20);
}

TEST(HugePageArrayTest, MovesOwnership) {
  HugePageArray<int> a(10);
  a[3] = 7;
  HugePageArray<int> b = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): the moved-from state is defined
  EXPECT_EQ(b[3], 7);
  a = std::move(b);
  EXPECT_EQ(a[3], 7);
  EXPECT_EQ(a.MemoryBytes(), 64u);
  HugePageArray<int> empty;
  EXPECT_EQ(empty.MemoryBytes(), 0u);
}

}  // namespace
}  // namespace strata::controller::internal_index
