#include "storage/remote/remote_messages.h"

#include <gtest/gtest.h>

#include "storage/host/test_util.h"

namespace strata::storage::remote {
namespace {

using testing::SyntheticKey;

std::vector<ChunkKey> Keys(size_t count) {
  std::vector<ChunkKey> keys;
  for (size_t i = 0; i < count; ++i) keys.push_back(SyntheticKey(42, i));
  return keys;
}

TEST(RemoteMessagesTest, QueryAndItsReplyRoundTrip) {
  auto query = DecodeQuery(EncodeQuery({.chain = Keys(3)}));
  ASSERT_TRUE(query.ok()) << query.status();
  EXPECT_EQ(query->chain, Keys(3));
  auto reply = DecodeQueryReply(
      EncodeQueryReply({.held = {{.payload_bytes = 1, .payload_checksum = 2, .num_tokens = 3}}}));
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->held.size(), 1u);
  EXPECT_EQ(reply->held[0].payload_checksum, 2u);
  EXPECT_EQ(reply->held[0].num_tokens, 3u);
}

TEST(RemoteMessagesTest, LeaseAndItsReplyRoundTrip) {
  auto lease = DecodeLease(EncodeLease({.keys = Keys(2), .lease_ms = 500}));
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ(lease->keys, Keys(2));
  EXPECT_EQ(lease->lease_ms, 500u);
  LeaseReply sent{.lease_id = 9};
  sent.chunks.push_back(
      {.code = 0,
       .chunk = {.payload_bytes = 8192, .payload_checksum = 5, .num_tokens = 32},
       .ranges = {{.offset = 4096, .length = 4096}, {.offset = 0, .length = 4096}}});
  sent.chunks.push_back({.code = static_cast<int32_t>(absl::StatusCode::kAborted)});
  auto reply = DecodeLeaseReply(EncodeLeaseReply(sent));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->lease_id, 9u);
  ASSERT_EQ(reply->chunks.size(), 2u);
  EXPECT_EQ(reply->chunks[0].ranges.size(), 2u);
  EXPECT_EQ(reply->chunks[0].ranges[0].offset, 4096u);
  EXPECT_EQ(reply->chunks[1].code, static_cast<int32_t>(absl::StatusCode::kAborted));
  auto release = DecodeRelease(EncodeRelease({.lease_id = 9}));
  ASSERT_TRUE(release.ok());
  EXPECT_EQ(release->lease_id, 9u);
}

TEST(RemoteMessagesTest, TruncationsTypesAndHostileCountsAreRefused) {
  LeaseReply sent{.lease_id = 1};
  sent.chunks.push_back(
      {.chunk = {.payload_bytes = 4096}, .ranges = {{.offset = 0, .length = 4096}}});
  const std::string whole = EncodeLeaseReply(sent);
  for (size_t size = 0; size < whole.size(); ++size) {
    EXPECT_FALSE(DecodeLeaseReply(whole.substr(0, size)).ok()) << size;
  }
  EXPECT_FALSE(DecodeLeaseReply(whole + "x").ok());
  // Every message's type is checked: a query is not a lease, a request not its reply.
  EXPECT_FALSE(DecodeLease(EncodeQuery({.chain = Keys(1)})).ok());
  EXPECT_FALSE(DecodeQueryReply(EncodeQuery({.chain = Keys(1)})).ok());
  // A count of keys far past what the message holds.
  std::string lying = EncodeQuery({.chain = Keys(1)});
  lying[1] = lying[2] = lying[3] = '\x7f';
  EXPECT_EQ(DecodeQuery(lying).status().code(), absl::StatusCode::kInvalidArgument);
  // A key with an unknown algorithm or a digest of the wrong size.
  std::string bad_key = EncodeQuery({.chain = Keys(1)});
  bad_key[5] = 9;
  EXPECT_FALSE(DecodeQuery(bad_key).ok());
  EXPECT_FALSE(
      DecodeQuery(EncodeQuery({.chain = std::vector<ChunkKey>(kMaxChainChunks + 1, Keys(1)[0])}))
          .ok());
}

TEST(RemoteMessagesTest, PushRoundTripsAndChecksItsLayout) {
  KvLayout layout = testing::SmallLayout("push");
  const ChunkKey key = SyntheticKey(layout, 1);
  PushRequest sent{.layout = layout};
  sent.chunks.push_back({.key = key,
                         .chunk = {.payload_bytes = 4096, .payload_checksum = 9, .num_tokens = 16},
                         .ranges = {{.offset = 8192, .length = 4096}}});
  auto push = DecodePush(EncodePush(sent));
  ASSERT_TRUE(push.ok()) << push.status();
  EXPECT_EQ(push->layout, layout);
  ASSERT_EQ(push->chunks.size(), 1u);
  EXPECT_EQ(push->chunks[0].key, key);
  EXPECT_EQ(push->chunks[0].ranges[0].offset, 8192u);
  auto reply = DecodePushReply(EncodePushReply({.codes = {0, 6}}));
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->codes, (std::vector<int32_t>{0, 6}));

  // A key of another layout, an unusable layout: refused before anything is reserved.
  PushRequest foreign = sent;
  foreign.chunks[0].key = SyntheticKey(layout.Fingerprint() + 1, 1);
  EXPECT_FALSE(DecodePush(EncodePush(foreign)).ok());
  PushRequest unusable = sent;
  unusable.layout.num_layers = 0;
  EXPECT_FALSE(DecodePush(EncodePush(unusable)).ok());
  const std::string whole = EncodePush(sent);
  for (size_t size = 0; size < whole.size(); ++size) {
    EXPECT_FALSE(DecodePush(whole.substr(0, size)).ok()) << size;
  }
}

TEST(RemoteMessagesTest, StreamMessagesRoundTripAndRefuseTruncationsAndOtherTypes) {
  KvLayout layout = testing::SmallLayout("stream");
  StreamOpen open{.stream_id = 3, .hold_ms = 250, .chunks = {.layout = layout}};
  open.chunks.chunks.push_back({.key = SyntheticKey(layout, 1),
                                .chunk = {.payload_bytes = 4096, .num_tokens = 16},
                                .ranges = {{.offset = 0, .length = 4096}}});
  auto opened = DecodeStreamOpen(EncodeStreamOpen(open));
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->stream_id, 3u);
  EXPECT_EQ(opened->hold_ms, 250u);
  EXPECT_EQ(opened->chunks.layout, layout);
  ASSERT_EQ(opened->chunks.chunks.size(), 1u);
  EXPECT_EQ(opened->chunks.chunks[0].key, open.chunks.chunks[0].key);

  auto layers = DecodeStreamLayers(EncodeStreamLayers({.stream_id = 3, .layers_ready = 2}));
  ASSERT_TRUE(layers.ok());
  EXPECT_EQ(layers->layers_ready, 2u);
  auto commit = DecodeStreamCommit(EncodeStreamCommit({.stream_id = 3, .checksums = {7, 8}}));
  ASSERT_TRUE(commit.ok());
  EXPECT_EQ(commit->checksums, (std::vector<uint64_t>{7, 8}));
  auto abort = DecodeStreamAbort(EncodeStreamAbort({.stream_id = 4}));
  ASSERT_TRUE(abort.ok());
  EXPECT_EQ(abort->stream_id, 4u);
  auto reply =
      DecodeStreamReply(RemoteMessage::kStreamCommit,
                        EncodeStreamReply(RemoteMessage::kStreamCommit, {.codes = {0, 15}}));
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->codes, (std::vector<int32_t>{0, 15}));
  EXPECT_TRUE(
      DecodeStreamAck(RemoteMessage::kStreamLayers, EncodeStreamAck(RemoteMessage::kStreamLayers))
          .ok());

  // An Open's reply is not a Commit's, nor an ack of Layers one of Abort.
  EXPECT_FALSE(DecodeStreamReply(RemoteMessage::kStreamCommit,
                                 EncodeStreamReply(RemoteMessage::kStreamOpen, {.codes = {0}}))
                   .ok());
  EXPECT_FALSE(
      DecodeStreamAck(RemoteMessage::kStreamAbort, EncodeStreamAck(RemoteMessage::kStreamLayers))
          .ok());
  for (const std::string& whole :
       {EncodeStreamOpen(open), EncodeStreamLayers({.stream_id = 1, .layers_ready = 1}),
        EncodeStreamCommit({.stream_id = 1, .checksums = {1}}),
        EncodeStreamAbort({.stream_id = 1})}) {
    for (size_t size = 0; size < whole.size(); ++size) {
      const std::string cut = whole.substr(0, size);
      EXPECT_FALSE(DecodeStreamOpen(cut).ok() || DecodeStreamLayers(cut).ok() ||
                   DecodeStreamCommit(cut).ok() || DecodeStreamAbort(cut).ok())
          << size;
    }
  }
  // A commit that claims more checksums than it carries.
  std::string hostile = EncodeStreamCommit({.stream_id = 1, .checksums = {}});
  hostile[9] = '\xff';
  EXPECT_FALSE(DecodeStreamCommit(hostile).ok());
}

}  // namespace
}  // namespace strata::storage::remote
