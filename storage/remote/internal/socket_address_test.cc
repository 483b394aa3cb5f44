#include "storage/remote/internal/socket_address.h"

#include <gtest/gtest.h>

namespace strata::storage::remote::internal {
namespace {

TEST(SocketAddressTest, RoundTripsIpv4AndIpv6) {
  auto v4 = ParseSocketAddress("127.0.0.1:7000");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(FormatSocketAddress(v4->storage), "127.0.0.1:7000");
  auto v6 = ParseSocketAddress("[::1]:65535");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(FormatSocketAddress(v6->storage), "[::1]:65535");
  auto any = ParseSocketAddress("0.0.0.0:0");
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(FormatSocketAddress(any->storage), "0.0.0.0:0");
}

TEST(SocketAddressTest, ResolvesNames) {
  auto local = ParseSocketAddress("localhost:80");
  ASSERT_TRUE(local.ok()) << local.status();
  const std::string text = FormatSocketAddress(local->storage);
  EXPECT_TRUE(text == "127.0.0.1:80" || text == "[::1]:80") << text;
}

TEST(SocketAddressTest, RefusesMalformedText) {
  for (const char* text : {"", "7000", ":7000", "host", "127.0.0.1:", "127.0.0.1:x",
                           "127.0.0.1:65536", "127.0.0.1:-1"}) {
    EXPECT_EQ(ParseSocketAddress(text).status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(SocketAddressTest, UnresolvableNameIsUnavailable) {
  EXPECT_EQ(ParseSocketAddress("no-such-host.invalid:7000").status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace strata::storage::remote::internal
