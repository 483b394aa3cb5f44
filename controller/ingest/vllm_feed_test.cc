#include "controller/ingest/vllm_feed.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "controller/ingest/testing/vllm_batch_writer.h"
#include "controller/ingest/testing/zmq_engine_publisher.h"
#include "gtest/gtest.h"
#include "tests/support/test_layout.h"

namespace strata::controller {
namespace {

using testing::VllmBatchWriter;
using testing::ZmqEnginePublisher;
using namespace std::chrono_literals;

constexpr auto kDeadline = 10s;

KvLayout Layout() {
  return test_support::SmallLayout(
      {.model_id = "m", .num_layers = 2, .num_kv_heads = 2, .head_dim = 4, .chunk_tokens = 4});
}

const std::vector<uint32_t> kTokens = {1, 2, 3, 4, 5, 6, 7, 8};

// Sends empty batches until the feed has applied one (a subscription takes a moment to reach a
// PUB socket, which drops what it sends before); returns the next sequence number.
uint64_t Handshake(ZmqEnginePublisher& engine, const VllmFeed& feed) {
  uint64_t sequence = 0;
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (feed.stats().messages == 0 && std::chrono::steady_clock::now() < deadline) {
    engine.Send(sequence++, VllmBatchWriter().Payload());
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_GT(feed.stats().messages, 0u);
  return sequence;
}

class VllmFeedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(engine_.endpoint().empty()) << "no loopback ZMQ endpoint";
    index_ = *ClusterIndex::Create({.max_instances = 8, .shard_count = 4});
    hasher_.emplace(*KeyHasher::Create(Layout(), {}));
  }

  std::unique_ptr<VllmFeed> StartFeed(std::chrono::milliseconds unreachable = 5'000ms) {
    absl::StatusOr<std::unique_ptr<VllmFeed>> feed = VllmFeed::Start({
        .instance_id = "vllm-a",
        .endpoint = engine_.endpoint(),
        .topic = "kv",
        .layout = Layout(),
        .index = index_.get(),
        .events = &hub_,
        .unreachable_timeout = unreachable,
    });
    EXPECT_TRUE(feed.ok()) << feed.status();
    return feed.ok() ? *std::move(feed) : nullptr;
  }

  // The prefix of kTokens the index says vllm-a holds.
  uint32_t HeldPrefix() const {
    for (const InstanceChainHit& hit : index_->LookupChain(hasher_->PrefixKeys(kTokens, {}))) {
      if (hit.instance_id == "vllm-a") return hit.prefix_chunks;
    }
    return 0;
  }

  // Waits until `done` holds or the deadline passes; returns whether it held.
  template <typename Done>
  static bool WaitFor(Done done) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  static std::string StoreBoth() {
    return VllmBatchWriter()
        .Add({.hashes = {10, 11}, .tokens = kTokens, .block_size = 4})
        .Payload();
  }

  std::unique_ptr<ClusterIndex> index_;
  std::optional<KeyHasher> hasher_;
  EventHub hub_;
  ZmqEnginePublisher engine_{"kv"};
};

TEST_F(VllmFeedTest, StoresAndRemovalsReachLookups) {
  std::unique_ptr<VllmFeed> feed = StartFeed();
  ASSERT_NE(feed, nullptr);
  uint64_t sequence = Handshake(engine_, *feed);
  EXPECT_TRUE(feed->stats().connected);

  engine_.Send(sequence++, StoreBoth());
  ASSERT_TRUE(WaitFor([&] { return HeldPrefix() == 2; }));
  const std::vector<InstanceChainHit> hits = index_->LookupChain(hasher_->PrefixKeys(kTokens, {}));
  ASSERT_EQ(hits.size(), 1u);
  EXPECT_EQ(hits[0].chunks_per_tier[static_cast<size_t>(Tier::kDevice)], 2u);

  engine_.Send(sequence++, VllmBatchWriter().Removed({11}).Payload());
  ASSERT_TRUE(WaitFor([&] { return HeldPrefix() == 1; }));
  // A message on another topic is not subscribed to.
  engine_.SendOnTopic("other", sequence, VllmBatchWriter().Cleared().Payload());
  engine_.Send(sequence++, VllmBatchWriter().Payload());
  ASSERT_TRUE(WaitFor([&] { return feed->stats().next_sequence == sequence; }));
  EXPECT_EQ(HeldPrefix(), 1u);
  const VllmFeedStats stats = feed->stats();
  EXPECT_EQ(stats.translate.stored_blocks, 2u);
  EXPECT_EQ(stats.translate.removed_blocks, 1u);
  EXPECT_EQ(stats.gaps + stats.restarts + stats.malformed, 0u);
}

// Lost messages may have removed anything: the instance is cleared, and what the engine stores
// afterwards is indexed again.
TEST_F(VllmFeedTest, GapClearsTheInstance) {
  std::unique_ptr<VllmFeed> feed = StartFeed();
  ASSERT_NE(feed, nullptr);
  uint64_t sequence = Handshake(engine_, *feed);
  engine_.Send(sequence++, StoreBoth());
  ASSERT_TRUE(WaitFor([&] { return HeldPrefix() == 2; }));

  ++sequence;  // lost
  engine_.Send(sequence++, VllmBatchWriter().Payload());
  ASSERT_TRUE(WaitFor([&] { return feed->stats().gaps == 1; }));
  EXPECT_EQ(HeldPrefix(), 0u);
  EXPECT_EQ(feed->stats().known_blocks, 0u);

  // A child of a chain from before the gap cannot be keyed; a new chain can.
  engine_.Send(sequence++,
               VllmBatchWriter()
                   .Add({.hashes = {12}, .parent = 11, .tokens = {9, 9, 9, 9}, .block_size = 4})
                   .Payload());
  engine_.Send(sequence++, StoreBoth());
  ASSERT_TRUE(WaitFor([&] { return HeldPrefix() == 2; }));
  EXPECT_EQ(feed->stats().translate.unknown_parent, 1u);
}

TEST_F(VllmFeedTest, RestartAndMalformedMessagesClearTheInstance) {
  std::unique_ptr<VllmFeed> feed = StartFeed();
  ASSERT_NE(feed, nullptr);
  uint64_t sequence = Handshake(engine_, *feed);
  engine_.Send(sequence++, StoreBoth());
  ASSERT_TRUE(WaitFor([&] { return HeldPrefix() == 2; }));

  engine_.Send(0, VllmBatchWriter().Payload());  // the engine started again
  ASSERT_TRUE(WaitFor([&] { return feed->stats().restarts == 1; }));
  EXPECT_EQ(HeldPrefix(), 0u);

  engine_.Send(1, StoreBoth());
  ASSERT_TRUE(WaitFor([&] { return HeldPrefix() == 2; }));
  engine_.Send(2, "not msgpack");
  ASSERT_TRUE(WaitFor([&] { return feed->stats().malformed == 1; }));
  EXPECT_EQ(HeldPrefix(), 0u);
}

TEST_F(VllmFeedTest, UnreachableEngineIsClearedAndTheHubHearsItAll) {
  struct Watcher : EventHub::Watcher {
    void Wake() override {}
  } watcher;
  hub_.Add(&watcher);
  std::unique_ptr<VllmFeed> feed = StartFeed(/*unreachable=*/200ms);
  ASSERT_NE(feed, nullptr);
  const uint64_t sequence = Handshake(engine_, *feed);
  engine_.Send(sequence, StoreBoth());
  ASSERT_TRUE(WaitFor([&] { return HeldPrefix() == 2; }));

  engine_.Close();
  ASSERT_TRUE(WaitFor([&] { return feed->stats().unreachable_clears == 1; }));
  EXPECT_FALSE(feed->stats().connected);
  EXPECT_EQ(HeldPrefix(), 0u);
  feed.reset();
  EXPECT_TRUE(index_->LookupChain(hasher_->PrefixKeys(kTokens, {})).empty());

  v1::ClusterWatchResponse taken;
  ASSERT_TRUE(hub_.Take(&watcher, 1000, taken).ok());
  std::vector<v1::InstanceEvents::Kind> kinds;
  int stored = 0;
  for (const v1::InstanceEvents& batch : taken.batches()) {
    EXPECT_EQ(batch.instance_id(), "vllm-a");
    kinds.push_back(batch.kind());
    for (const v1::ChunkEvent& event : batch.events()) stored += event.has_stored() ? 1 : 0;
  }
  EXPECT_EQ(stored, 2);
  EXPECT_EQ(kinds, (std::vector<v1::InstanceEvents::Kind>{v1::InstanceEvents::EVENTS,
                                                          v1::InstanceEvents::CLEARED,
                                                          v1::InstanceEvents::LEFT}));
  hub_.Remove(&watcher);
}

TEST_F(VllmFeedTest, StartRefusesBadOptions) {
  std::unique_ptr<VllmFeed> feed = StartFeed();
  ASSERT_NE(feed, nullptr);
  // The id is taken.
  EXPECT_EQ(VllmFeed::Start({.instance_id = "vllm-a",
                             .endpoint = engine_.endpoint(),
                             .layout = Layout(),
                             .index = index_.get()})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  KvLayout bad = Layout();
  bad.num_layers = 0;
  EXPECT_EQ(VllmFeed::Start({.instance_id = "vllm-b",
                             .endpoint = engine_.endpoint(),
                             .layout = bad,
                             .index = index_.get()})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VllmFeed::Start({.instance_id = "vllm-b",
                             .endpoint = "no-such-transport://x",
                             .layout = Layout(),
                             .index = index_.get()})
                .status()
                .code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(
      VllmFeed::Start({.instance_id = "vllm-b", .endpoint = engine_.endpoint(), .layout = Layout()})
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
  // A refused start leaves no instance behind.
  EXPECT_EQ(index_->stats().instances, 1u);
}

}  // namespace
}  // namespace strata::controller
