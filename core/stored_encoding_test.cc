#include "core/stored_encoding.h"

#include <vector>

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(CodecSet, HoldsIdsOneTo63Only) {
  CodecSet set;
  EXPECT_TRUE(set.empty());
  EXPECT_TRUE(set.Ids().empty());
  set.Add(6).Add(1).Add(63).Add(6);
  EXPECT_FALSE(set.empty());
  EXPECT_EQ(set.Ids(), (std::vector<uint32_t>{1, 6, 63}));
  EXPECT_TRUE(set.Contains(1));
  EXPECT_FALSE(set.Contains(2));
  // 0 names no codec; 64 and above would alias 0 and up in a 64-bit mask.
  CodecSet ignored;
  ignored.Add(0).Add(64).Add(65).Add(0xffffffffu);
  EXPECT_TRUE(ignored.empty());
  EXPECT_FALSE(set.Contains(0));
  EXPECT_FALSE(set.Contains(64 + 1));
  EXPECT_FALSE(set.Contains(0x10001u)) << "no truncation to 16 bits";
  EXPECT_EQ(CodecSet().Add(3), CodecSet().Add(3));
  EXPECT_FALSE(CodecSet().Add(3) == CodecSet().Add(4));
}

TEST(CodecSet, AllHoldsEveryCodecAndNothingElse) {
  const CodecSet all = CodecSet::All();
  EXPECT_EQ(all.Ids().size(), 63u);
  EXPECT_TRUE(all.Contains(1));
  EXPECT_TRUE(all.Contains(63));
  EXPECT_FALSE(all.Contains(0));
  EXPECT_FALSE(all.Contains(64));
}

}  // namespace
}  // namespace strata
