// The controller's feed of a daemon's chunks into the cluster index (controller/ingest), against
// real stratad processes: a snapshot of what a daemon held before the feed started, its events
// after, a Clear, a daemon's disk tier, two daemons holding different prefixes of one chain, a
// killed daemon whose chunks leave the index after the unreachable timeout, a restarted one (a
// new epoch: a fresh snapshot, nothing stale), and a gap in the events while the feed was cut off
// (a fresh snapshot).
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "controller/index/cluster_index.h"
#include "controller/ingest/daemon_feed.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/cluster_client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/tcp_relay.h"
#include "tests/support/test_layout.h"

namespace strata::controller {
namespace {

using namespace std::chrono_literals;
using test_support::DaemonProcess;
using test_support::Eventually;
using test_support::RawEngineClient;

KvLayout FeedLayout() {
  return test_support::SmallLayout({.model_id = "feed-model", .head_dim = 64, .chunk_tokens = 64});
}

std::vector<ChunkKey> Chain(size_t chunks) {
  std::vector<uint32_t> tokens(chunks * 64);
  std::iota(tokens.begin(), tokens.end(), 1000);
  return KeyHasher::Create(FeedLayout(), {})->PrefixKeys(tokens, {});
}

// The prefix of `chain` the index says `instance` holds (0 when it is not among the hits).
uint32_t HeldPrefix(const ClusterIndex& index, std::span<const ChunkKey> chain,
                    const std::string& instance) {
  for (const InstanceChainHit& hit : index.LookupChain(chain)) {
    if (hit.instance_id == instance) return hit.prefix_chunks;
  }
  return 0;
}

class ControllerFeedTest : public ::testing::Test {
 protected:
  void SetUp() override { index_ = *ClusterIndex::Create({.max_instances = 16, .shard_count = 4}); }

  // A daemon and an engine session to store chunks through.
  struct Node {
    std::unique_ptr<DaemonProcess> daemon;
    std::unique_ptr<RawEngineClient> engine;
  };
  Node StartNode(test_support::DaemonProcessOptions options = {}) {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(options);
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    Node node{.daemon = *std::move(daemon)};
    node.engine = std::make_unique<RawEngineClient>(node.daemon->engine_socket());
    EXPECT_TRUE(node.engine->Handshake(FeedLayout()).ok());
    return node;
  }

  // A feed of the daemon at gRPC `target`.
  std::unique_ptr<DaemonFeed> Feed(const std::string& instance, const std::string& target,
                                   std::chrono::milliseconds unreachable_timeout = 5s) {
    absl::StatusOr<std::unique_ptr<DaemonFeed>> feed = DaemonFeed::Start(
        {.instance_id = instance,
         .channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials()),
         .index = index_.get(),
         .page_size = 3,  // several pages for a few chunks
         .retry_delay = 50ms,
         .unreachable_timeout = unreachable_timeout});
    EXPECT_TRUE(feed.ok()) << feed.status();
    return feed.ok() ? *std::move(feed) : nullptr;
  }

  std::unique_ptr<ClusterIndex> index_;
};

TEST_F(ControllerFeedTest, ASnapshotThenTheEventsThatFollow) {
  Node node = StartNode();
  const std::vector<ChunkKey> chain = Chain(8);
  // Held before the feed starts: only the snapshot can tell the index.
  ASSERT_TRUE(node.engine->Store({chain.begin(), chain.begin() + 5}, 64, 1).ok());

  std::unique_ptr<DaemonFeed> feed = Feed("node-a", node.daemon->control_target());
  ASSERT_NE(feed, nullptr);
  ASSERT_TRUE(Eventually([&] { return feed->stats().following; }));
  EXPECT_EQ(HeldPrefix(*index_, chain, "node-a"), 5u);
  EXPECT_EQ(feed->stats().snapshots, 1u);
  EXPECT_EQ(feed->stats().snapshot_chunks, 5u);

  // Stored after: the stream's events.
  ASSERT_TRUE(node.engine->Store({chain.begin() + 5, chain.end()}, 64, 2).ok());
  ASSERT_TRUE(Eventually([&] { return HeldPrefix(*index_, chain, "node-a") == 8; }));
  EXPECT_GE(feed->stats().events_applied, 3u);

  // A Clear empties the instance in the index too.
  grpc::ClientContext context;
  v1::ClearRequest clear;
  clear.set_all(true);
  v1::ClearResponse cleared;
  ASSERT_TRUE(node.daemon->control().Clear(&context, clear, &cleared).ok());
  ASSERT_TRUE(Eventually([&] { return HeldPrefix(*index_, chain, "node-a") == 0; }));
  EXPECT_EQ(feed->stats().malformed_events, 0u);
  // The Cleared is followed by a snapshot of the tiers it did not clear (none here).
  ASSERT_TRUE(Eventually([&] { return feed->stats().snapshots == 2; }));
  EXPECT_EQ(feed->stats().snapshot_chunks, 0u);

  // The feed's end takes the instance out of the index.
  feed.reset();
  ASSERT_TRUE(node.engine->Store({chain.begin(), chain.begin() + 1}, 64, 3).ok());
  EXPECT_EQ(index_->stats().instances, 0u);
}

// A daemon with a disk tier: the snapshot lists both tiers, chunks moved to disk later arrive by
// its events under the disk tier, and a Clear of the host tier alone leaves the disk's chunks in
// the index (the snapshot after the Cleared brings them back).
TEST_F(ControllerFeedTest, TheDiskTierIsSnapshottedAndFollowed) {
  char dir[] = "/tmp/strata-feed-disk-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  Node node = StartNode(
      {.extra_toml = fmt::format("[disk]\ndirectory = \"{}\"\ncapacity_bytes = \"16MiB\"\n"
                                 "segment_bytes = \"1MiB\"\n",
                                 dir)});
  const std::vector<ChunkKey> chain = Chain(6);
  auto move_to_disk = [&](std::span<const ChunkKey> keys) {
    v1::MoveRequest move;
    for (const ChunkKey& key : keys) ToProto(key, move.mutable_selector()->add_keys());
    move.set_target(v1::TIER_DISK);
    v1::MoveResponse moved;
    grpc::ClientContext context;
    const grpc::Status status = node.daemon->control().Move(&context, move, &moved);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(moved.moved_chunks(), keys.size());
  };
  auto per_tier = [&](Tier tier) -> uint32_t {
    const std::vector<InstanceChainHit> hits = index_->LookupChain(chain);
    return hits.empty() ? 0 : hits[0].chunks_per_tier[static_cast<size_t>(tier)];
  };
  // Before the feed: chunks 0 and 1 on disk, 2 in the host tier.
  ASSERT_TRUE(node.engine->Store({chain.begin(), chain.begin() + 3}, 64, 1).ok());
  move_to_disk({chain.begin(), chain.begin() + 2});

  std::unique_ptr<DaemonFeed> feed = Feed("node-d", node.daemon->control_target());
  ASSERT_NE(feed, nullptr);
  ASSERT_TRUE(Eventually([&] { return feed->stats().following; }));
  EXPECT_EQ(feed->stats().snapshot_chunks, 3u);
  EXPECT_EQ(HeldPrefix(*index_, chain, "node-d"), 3u);
  EXPECT_EQ(per_tier(Tier::kDisk), 2u);
  EXPECT_EQ(per_tier(Tier::kHost), 1u);

  // After: chunks 3..5 stored, chunk 3 moved to disk, through the events.
  ASSERT_TRUE(node.engine->Store({chain.begin() + 3, chain.end()}, 64, 2).ok());
  move_to_disk({chain.begin() + 3, chain.begin() + 4});
  ASSERT_TRUE(Eventually([&] { return per_tier(Tier::kDisk) == 3; }));
  EXPECT_EQ(HeldPrefix(*index_, chain, "node-d"), 6u);
  EXPECT_EQ(per_tier(Tier::kHost), 3u);

  // Clear the host tier alone: chunks 0, 1 and 3 stay on disk, so the held prefix is 0..1.
  v1::ClearRequest clear;
  clear.set_all(true);
  clear.set_tier(v1::TIER_HOST);
  v1::ClearResponse cleared;
  grpc::ClientContext context;
  ASSERT_TRUE(node.daemon->control().Clear(&context, clear, &cleared).ok());
  ASSERT_TRUE(Eventually(
      [&] { return feed->stats().snapshots == 2 && HeldPrefix(*index_, chain, "node-d") == 2; }));
  EXPECT_EQ(feed->stats().snapshot_chunks, 3u);
  EXPECT_EQ(per_tier(Tier::kDisk), 2u);
  EXPECT_EQ(per_tier(Tier::kHost), 0u);
  EXPECT_EQ(feed->stats().malformed_events, 0u);
  feed.reset();
  node.daemon->Stop();
  std::filesystem::remove_all(dir);
}

TEST_F(ControllerFeedTest, TwoDaemonsHoldingDifferentPrefixes) {
  Node a = StartNode();
  Node b = StartNode();
  const std::vector<ChunkKey> chain = Chain(6);
  ASSERT_TRUE(a.engine->Store({chain.begin(), chain.begin() + 2}, 64, 1).ok());
  std::unique_ptr<DaemonFeed> feed_a = Feed("node-a", a.daemon->control_target());
  std::unique_ptr<DaemonFeed> feed_b = Feed("node-b", b.daemon->control_target());
  ASSERT_TRUE(b.engine->Store(chain, 64, 1).ok());
  ASSERT_TRUE(Eventually([&] {
    const std::vector<InstanceChainHit> hits = index_->LookupChain(chain);
    return hits.size() == 2 && hits[0].instance_id == "node-b" && hits[0].prefix_chunks == 6 &&
           hits[1].instance_id == "node-a" && hits[1].prefix_chunks == 2;
  }));
  EXPECT_EQ(index_->LookupChain(chain)[0].chunks_per_tier[static_cast<size_t>(Tier::kHost)], 6u);
}

TEST_F(ControllerFeedTest, AKilledDaemonsChunksLeaveAfterTheTimeout) {
  Node node = StartNode();
  const std::vector<ChunkKey> chain = Chain(3);
  ASSERT_TRUE(node.engine->Store(chain, 64, 1).ok());
  std::unique_ptr<DaemonFeed> feed =
      Feed("node-a", node.daemon->control_target(), /*unreachable_timeout=*/500ms);
  ASSERT_TRUE(Eventually([&] { return HeldPrefix(*index_, chain, "node-a") == 3; }));

  node.engine.reset();
  node.daemon->Kill();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return HeldPrefix(*index_, chain, "node-a") == 0; }));
  const auto gone_after = std::chrono::steady_clock::now() - killed;
  EXPECT_GE(gone_after, 400ms) << "kept while the daemon may only be slow";
  EXPECT_LT(gone_after, 5s);
  EXPECT_EQ(feed->stats().unreachable_clears, 1u);
  EXPECT_FALSE(feed->stats().following);
  EXPECT_EQ(index_->stats().instances, 1u) << "still registered: it may come back";
}

// The daemon restarts behind the same control socket: the new epoch takes a fresh snapshot, in
// which the first run's chunks are gone and the second run's are there.
TEST_F(ControllerFeedTest, ARestartedDaemonIsSnapshottedAgainWithNothingStale) {
  char dir[] = "/tmp/strata-feed-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string socket = std::string(dir) + "/control.sock";
  const test_support::DaemonProcessOptions options{.extra_args = {"--control-socket", socket}};
  Node first = StartNode(options);
  const std::vector<ChunkKey> chain = Chain(4);
  ASSERT_TRUE(first.engine->Store(chain, 64, 1).ok());
  std::unique_ptr<DaemonFeed> feed = Feed("node-a", "unix:" + socket);
  ASSERT_TRUE(Eventually([&] { return HeldPrefix(*index_, chain, "node-a") == 4; }));
  const uint64_t first_epoch = feed->stats().epoch;

  first.engine.reset();
  first.daemon->Kill();
  Node second = StartNode(options);
  // A chain of its own (two chunks of token 7).
  const std::vector<ChunkKey> other =
      KeyHasher::Create(FeedLayout(), {})->PrefixKeys(std::vector<uint32_t>(128, 7), {});
  ASSERT_TRUE(second.engine->Store(other, 64, 2).ok());
  ASSERT_TRUE(Eventually([&] {
    return feed->stats().following && feed->stats().epoch != first_epoch &&
           HeldPrefix(*index_, other, "node-a") == 2;
  }));
  EXPECT_EQ(HeldPrefix(*index_, chain, "node-a"), 0u) << "the first run's chunks are gone";
  EXPECT_EQ(feed->stats().snapshots, 2u);
  feed.reset();
  second.daemon->Stop();
  std::filesystem::remove_all(dir);
}

// A gap in the events (the daemon's ring overflowed while the feed was cut off from it, with both
// still up) takes a fresh snapshot of that instance, so the index ends up holding what the daemon
// holds: the chunks stored meanwhile, and not those removed meanwhile.
TEST_F(ControllerFeedTest, AGapInTheEventsTakesAFreshSnapshot) {
  Node node = StartNode({.event_ring_capacity = 4});
  absl::StatusOr<std::unique_ptr<test_support::TcpRelay>> relay =
      test_support::TcpRelay::Start(node.daemon->control_target());
  ASSERT_TRUE(relay.ok()) << relay.status();
  std::unique_ptr<DaemonFeed> feed = Feed("node-a", (*relay)->address());
  ASSERT_NE(feed, nullptr);
  ASSERT_TRUE(Eventually([&] { return feed->stats().following; }));
  const std::vector<ChunkKey> chain = Chain(12);
  std::vector<uint32_t> other_tokens(2 * 64);
  std::iota(other_tokens.begin(), other_tokens.end(), 70'000);
  const std::vector<ChunkKey> other =
      KeyHasher::Create(FeedLayout(), {})->PrefixKeys(other_tokens, {});
  ASSERT_TRUE(node.engine->Store({chain.begin(), chain.begin() + 2}, 64, 1).ok());
  ASSERT_TRUE(node.engine->Store(other, 64, 1).ok());
  ASSERT_TRUE(Eventually([&] {
    return HeldPrefix(*index_, chain, "node-a") == 2 && HeldPrefix(*index_, other, "node-a") == 2;
  }));

  (*relay)->Cut();
  ASSERT_TRUE(Eventually([&] { return !feed->stats().following; }));
  // Twelve events while cut off, three times what the ring keeps.
  ASSERT_TRUE(node.engine->Store({chain.begin() + 2, chain.end()}, 64, 2).ok());
  grpc::ClientContext context;
  v1::ClearRequest clear;
  for (const ChunkKey& key : other) *clear.mutable_selector()->add_keys() = ToProto(key);
  v1::ClearResponse cleared;
  ASSERT_TRUE(node.daemon->control().Clear(&context, clear, &cleared).ok());
  ASSERT_EQ(cleared.removed_chunks(), 2u);
  EXPECT_EQ(HeldPrefix(*index_, chain, "node-a"), 2u) << "nothing reached the index";

  (*relay)->Resume();
  ASSERT_TRUE(Eventually([&] { return feed->stats().following && feed->stats().snapshots == 2; }))
      << "snapshots " << feed->stats().snapshots;
  EXPECT_EQ(HeldPrefix(*index_, chain, "node-a"), 12u);
  EXPECT_EQ(HeldPrefix(*index_, other, "node-a"), 0u);
  EXPECT_EQ(feed->stats().malformed_events, 0u);
}

}  // namespace
}  // namespace strata::controller
