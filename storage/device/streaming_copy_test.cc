#include "storage/device/streaming_copy.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace strata::storage {
namespace {

std::vector<uint8_t> Pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + seed);
  return bytes;
}

// Every size around the vector widths and every misalignment of either side: the copied bytes
// equal the source and nothing outside the destination range changes.
TEST(StreamingCopyTest, CopiesExactlyTheRangeAtAnyAlignmentAndSize) {
  constexpr size_t kGuard = 64;
  const std::vector<uint8_t> source = Pattern(4096 + 128, 7);
  std::vector<size_t> sizes;
  for (size_t s = 0; s <= 300; ++s) sizes.push_back(s);
  for (size_t s : {1023, 1024, 1025, 4095, 4096}) sizes.push_back(s);
  for (size_t src_offset : {0, 1, 15, 16, 31, 33}) {
    for (size_t dst_offset : {0, 1, 8, 17, 32, 63}) {
      for (size_t size : sizes) {
        std::vector<uint8_t> dst(kGuard + dst_offset + size + kGuard, 0xA5);
        StreamingCopy(dst.data() + kGuard + dst_offset, source.data() + src_offset, size);
        StreamingCopyFence();
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= kGuard + dst_offset && i < kGuard + dst_offset + size;
          const uint8_t want = inside ? source[src_offset + i - kGuard - dst_offset] : 0xA5;
          ASSERT_EQ(dst[i], want) << "size " << size << " src+" << src_offset << " dst+"
                                  << dst_offset << " byte " << i;
        }
      }
    }
  }
}

TEST(StreamingCopyTest, CopiesLargeRanges) {
  const std::vector<uint8_t> source = Pattern((8 << 20) + 77, 3);
  std::vector<uint8_t> dst(source.size() + 5, 0);
  StreamingCopy(dst.data() + 5, source.data(), source.size());
  StreamingCopyFence();
  EXPECT_TRUE(std::equal(source.begin(), source.end(), dst.begin() + 5));
}

}  // namespace
}  // namespace strata::storage
