#include "controller/ingest/daemon_events.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/convert.h"

namespace strata::controller {
namespace {

using ::testing::HasSubstr;

ChunkKey Key(uint8_t seed) {
  std::array<uint8_t, 16> digest{};
  digest.fill(seed);
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, 0xF00D, digest);
}

v1::ChunkEvent StoredEvent(uint64_t sequence, const ChunkKey& key, v1::Tier tier) {
  v1::ChunkEvent event;
  event.set_sequence(sequence);
  event.set_tier(tier);
  *event.mutable_stored()->mutable_key() = ToProto(key);
  return event;
}

TEST(DaemonEventsTest, EveryKindConverts) {
  absl::StatusOr<ChunkEvent> stored = FromProto(StoredEvent(1, Key(1), v1::TIER_DISK));
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->kind, ChunkEventKind::kStored);
  EXPECT_EQ(stored->tier, Tier::kDisk);
  EXPECT_EQ(stored->key, Key(1));

  v1::ChunkEvent removed;
  removed.set_tier(v1::TIER_HOST);
  *removed.mutable_removed()->mutable_key() = ToProto(Key(2));
  absl::StatusOr<ChunkEvent> converted = FromProto(removed);
  ASSERT_TRUE(converted.ok());
  EXPECT_EQ(converted->kind, ChunkEventKind::kRemoved);
  EXPECT_EQ(converted->key, Key(2));

  v1::ChunkEvent cleared;
  cleared.set_tier(v1::TIER_HOST);
  cleared.mutable_cleared();
  ASSERT_TRUE(FromProto(cleared).ok());
  EXPECT_EQ(FromProto(cleared)->kind, ChunkEventKind::kCleared);
}

TEST(DaemonEventsTest, BadEventsAreInvalidArgumentNamingTheirSequence) {
  v1::ChunkEvent no_tier = StoredEvent(7, Key(1), v1::TIER_UNSPECIFIED);
  EXPECT_EQ(FromProto(no_tier).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(FromProto(no_tier).status().message(), HasSubstr("event 7"));

  v1::ChunkEvent empty;
  empty.set_sequence(8);
  empty.set_tier(v1::TIER_HOST);
  EXPECT_THAT(FromProto(empty).status().message(), HasSubstr("no event"));

  v1::ChunkEvent short_digest = StoredEvent(9, Key(1), v1::TIER_HOST);
  short_digest.mutable_stored()->mutable_key()->set_digest("abc");
  EXPECT_EQ(FromProto(short_digest).status().code(), absl::StatusCode::kInvalidArgument);
}

v1::ChunkColumns Columns(const std::vector<ChunkKey>& keys) {
  v1::ChunkColumns columns;
  for (const ChunkKey& key : keys) {
    const v1::ChunkKey proto = ToProto(key);
    columns.add_algorithms(proto.algorithm());
    columns.add_namespaces(proto.namespace_());
    columns.add_layout_fingerprints(proto.layout_fingerprint());
    columns.mutable_digests()->append(proto.digest());
    columns.add_tiers(v1::TIER_HOST);
  }
  return columns;
}

TEST(DaemonEventsTest, AListedPageBecomesStoredEvents) {
  std::vector<ChunkEvent> out = {{.kind = ChunkEventKind::kCleared}};
  ASSERT_TRUE(AppendListedChunks(Columns({Key(1), Key(2), Key(3)}), out).ok());
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].kind, ChunkEventKind::kCleared);
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(out[i].kind, ChunkEventKind::kStored);
    EXPECT_EQ(out[i].tier, Tier::kHost);
    EXPECT_EQ(out[i].key, Key(static_cast<uint8_t>(i)));
  }
}

TEST(DaemonEventsTest, AMalformedPageAppendsNothing) {
  std::vector<ChunkEvent> out;
  v1::ChunkColumns short_tiers = Columns({Key(1), Key(2)});
  short_tiers.mutable_tiers()->RemoveLast();
  EXPECT_EQ(AppendListedChunks(short_tiers, out).code(), absl::StatusCode::kInvalidArgument);

  v1::ChunkColumns short_digests = Columns({Key(1), Key(2)});
  short_digests.mutable_digests()->resize(20);
  EXPECT_THAT(AppendListedChunks(short_digests, out).message(), HasSubstr("end early"));

  v1::ChunkColumns long_digests = Columns({Key(1)});
  long_digests.mutable_digests()->append("x");
  EXPECT_THAT(AppendListedChunks(long_digests, out).message(), HasSubstr("more digest bytes"));

  v1::ChunkColumns bad_tier = Columns({Key(1), Key(2)});
  bad_tier.set_tiers(1, static_cast<v1::Tier>(99));
  EXPECT_THAT(AppendListedChunks(bad_tier, out).message(), HasSubstr("chunk 1"));
  EXPECT_TRUE(out.empty()) << "all or nothing";
}

}  // namespace
}  // namespace strata::controller
