#include "storage/remote/peer_messages.h"

#include <gtest/gtest.h>

namespace strata::storage::remote {
namespace {

Handshake Sample() {
  return Handshake{.node_id = "node-a",
                   .listen_address = "10.0.0.1:7000",
                   .layouts = {1, 0xfeedfacecafebeefull}};
}

TEST(PeerMessagesTest, HandshakeRoundTrips) {
  auto decoded = DecodeHandshake(EncodeHandshake(Sample()));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->protocol_version, kPeerProtocolVersion);
  EXPECT_EQ(decoded->node_id, "node-a");
  EXPECT_EQ(decoded->listen_address, "10.0.0.1:7000");
  EXPECT_EQ(decoded->layouts, Sample().layouts);
  EXPECT_EQ(*MessageType(EncodeHandshake(Sample())), static_cast<uint8_t>(PeerMessage::kHandshake));
}

TEST(PeerMessagesTest, ReplyRoundTripsAndIsNotTakenForAnotherMessage) {
  const std::string reply = EncodeHandshakeReply({.node_id = "b", .layouts = {7}});
  auto decoded = DecodeHandshakeReply(reply);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->node_id, "b");
  EXPECT_EQ(decoded->layouts, std::vector<uint64_t>{7});
  EXPECT_FALSE(DecodeHandshake(reply).ok());
  EXPECT_FALSE(DecodeHandshakeReply(EncodeHandshake(Sample())).ok());
  EXPECT_FALSE(DecodeHandshakeReply(EncodePing()).ok());
}

TEST(PeerMessagesTest, EveryTruncationIsRefused) {
  const std::string whole = EncodeHandshake(Sample());
  for (size_t size = 0; size < whole.size(); ++size) {
    EXPECT_EQ(DecodeHandshake(whole.substr(0, size)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << size;
  }
  EXPECT_EQ(DecodeHandshake(whole + "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MessageType("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PeerMessagesTest, OversizedFieldsAreRefusedWithoutAllocating) {
  Handshake big = Sample();
  big.node_id.assign(kMaxTextBytes + 1, 'x');
  EXPECT_EQ(DecodeHandshake(EncodeHandshake(big)).status().code(),
            absl::StatusCode::kInvalidArgument);
  Handshake many = Sample();
  many.layouts.assign(kMaxLayouts + 1, 3);
  EXPECT_EQ(DecodeHandshake(EncodeHandshake(many)).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A length field claiming 4 GiB in a short message.
  std::string lying = EncodeHandshake(Sample());
  lying[5] = lying[6] = lying[7] = lying[8] = '\xff';
  EXPECT_EQ(DecodeHandshake(lying).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::storage::remote
