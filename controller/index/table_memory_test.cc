#include "controller/index/table_memory.h"

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace strata::controller::internal_index {
namespace {

TEST(TableMemoryTest, BlocksAreZeroAndAligned) {
  TableMemory memory;
  auto* small = static_cast<uint64_t*>(memory.Allocate(TableMemory::kMinBlockBytes));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 4096, 0u);
  auto* large = static_cast<uint64_t*>(memory.Allocate(4u << 20));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(large) % (2u << 20), 0u);
  EXPECT_EQ(small[511], 0u);
  EXPECT_EQ(large[12345], 0u);
  EXPECT_EQ(memory.allocated_bytes(), TableMemory::kMinBlockBytes + (4u << 20));
}

TEST(TableMemoryTest, AReleasedBlockStaysReadableAndComesBackZeroed) {
  TableMemory memory;
  auto* block = static_cast<uint64_t*>(memory.Allocate(1u << 16));
  std::memset(block, 0xab, 1u << 16);
  memory.Release(block, 1u << 16);
  EXPECT_EQ(memory.allocated_bytes(), 0u);
  // A stale reader still reads mapped memory: zeros, its pages having gone back to the kernel.
  EXPECT_EQ(block[100], 0u);
  // The next block of that size is the same range, zeroed.
  auto* again = static_cast<uint64_t*>(memory.Allocate(1u << 16));
  EXPECT_EQ(again, block);
  EXPECT_EQ(again[100], 0u);
  // Another size is another range.
  EXPECT_NE(memory.Allocate(1u << 17), static_cast<void*>(block));
}

}  // namespace
}  // namespace strata::controller::internal_index
