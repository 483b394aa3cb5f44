#include "core/cbor_writer.h"

#include <vector>

#include "core/hex.h"
#include "gtest/gtest.h"

namespace strata {
namespace {

std::string Hex(const CborWriter& w) {
  return HexEncode({reinterpret_cast<const uint8_t*>(w.bytes().data()), w.bytes().size()});
}

TEST(CborWriter, UnsignedUsesShortestHeads) {
  // Boundaries from RFC 8949 appendix A.
  const std::vector<std::pair<uint64_t, std::string>> cases = {{0, "00"},
                                                               {23, "17"},
                                                               {24, "1818"},
                                                               {255, "18ff"},
                                                               {256, "190100"},
                                                               {65535, "19ffff"},
                                                               {65536, "1a00010000"},
                                                               {4294967295, "1affffffff"},
                                                               {4294967296, "1b0000000100000000"}};
  for (const auto& [value, hex] : cases) {
    CborWriter w;
    w.Unsigned(value);
    EXPECT_EQ(Hex(w), hex) << value;
  }
}

TEST(CborWriter, UnsignedArrayMatchesScalarPath) {
  const std::vector<uint32_t> values = {0,   5,    23,    24,    200,    255,
                                        256, 1000, 65535, 65536, 128255, 0xffffffffu};
  CborWriter fast;
  fast.UnsignedArray(values);
  CborWriter slow;
  slow.ArrayHeader(values.size());
  for (uint32_t v : values) slow.Unsigned(v);
  EXPECT_EQ(fast.bytes(), slow.bytes());
  EXPECT_EQ(Hex(fast).substr(0, 6), "8c0005");
}

TEST(CborWriter, TextBytesNullAndNesting) {
  CborWriter w;
  w.ArrayHeader(3);
  w.Text("0");
  w.Bytes(std::vector<uint8_t>{0xde, 0xad});
  w.Null();
  EXPECT_EQ(Hex(w),
            "83613042dead"
            "f6");
  CborWriter long_bytes;
  long_bytes.Bytes(std::vector<uint8_t>(32, 0));
  EXPECT_EQ(Hex(long_bytes).substr(0, 4), "5820");
}

}  // namespace
}  // namespace strata
