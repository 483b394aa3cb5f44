#include "core/host_address.h"

#include "gtest/gtest.h"

namespace strata {
namespace {

TEST(HostAddressTest, AWildcardHostBecomesThisHostsName) {
  const std::string host = HostName();
  ASSERT_FALSE(host.empty());
  EXPECT_EQ(DialableAddress("0.0.0.0:0", 50051), host + ":50051");
  EXPECT_EQ(DialableAddress("[::]:7000", 7000), host + ":7000");
  EXPECT_EQ(DialableAddress(":9", 9), host + ":9");
}

TEST(HostAddressTest, AnExplicitHostIsKeptWithTheBoundPort) {
  EXPECT_EQ(DialableAddress("127.0.0.1:0", 40000), "127.0.0.1:40000");
  EXPECT_EQ(DialableAddress("[::1]:1", 2), "[::1]:2");
  EXPECT_EQ(DialableAddress("node-7.example:8080", 8080), "node-7.example:8080");
}

}  // namespace
}  // namespace strata
