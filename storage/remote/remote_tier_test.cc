// The remote tier end to end inside one process: two "daemons" (a TieredStore, a PeerSet, a
// RemoteServer and a UcxTransport over the host arena, tcp on lo), A holding chunks and B finding
// them with Query and loading them through its TieredStore (promotion from the remote tier),
// byte-exact; and the ways a fetch fails: corrupted bytes, a cut link, a silent peer, a chunk the
// peer lost meanwhile. Each failure leaves nothing committed in B.
#include "storage/remote/remote_tier.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "storage/codec/codec_registry.h"
#include "storage/host/test_util.h"
#include "storage/remote/testing/test_daemon.h"

namespace strata::storage::remote {
namespace {

using namespace std::chrono_literals;
using testing::Pattern;
using testing::TestDaemon;
using testing::TestLayout;

class RemoteTierTest : public ::testing::Test {
 protected:
  void Start(bool faulty = false, std::chrono::microseconds budget = 2s,
             std::chrono::milliseconds fetch_timeout = 3s, bool a_has_disk = false) {
    a_ = std::make_unique<TestDaemon>(TestDaemon::Options{.node_id = "a", .disk = a_has_disk},
                                      layout_);
    b_ = std::make_unique<TestDaemon>(TestDaemon::Options{.node_id = "b",
                                                          .dial = {a_->address()},
                                                          .remote_tier = true,
                                                          .faulty = faulty,
                                                          .lookup_budget = budget,
                                                          .fetch_timeout = fetch_timeout},
                                      layout_);
    ASSERT_TRUE(b_->PeerUp());
  }

  void TearDown() override {
    b_.reset();
    a_.reset();
  }

  std::shared_ptr<const KvLayout> layout_ = TestLayout();
  std::unique_ptr<TestDaemon> a_;
  std::unique_ptr<TestDaemon> b_;
};

TEST_F(RemoteTierTest, AChunkStoredThroughAIsFoundAndLoadedByteExactThroughB) {
  Start();
  for (uint64_t id = 0; id < 8; ++id) a_->Store(id);
  const std::vector<ChunkKey> chain = b_->Chain(8);
  EXPECT_EQ(b_->Query(chain), 8u);
  EXPECT_EQ(b_->store().LocatePrefix(chain), std::vector<Tier>(8, Tier::kRemote));

  LoadLeases loaded = b_->Load(chain);
  ASSERT_TRUE(loaded.failure.ok()) << loaded.failure;
  ASSERT_EQ(loaded.leases.size(), 8u);
  EXPECT_EQ(loaded.promoted_chunks, 8u);
  for (uint64_t id = 0; id < 8; ++id) EXPECT_TRUE(b_->Holds(loaded.leases[id], id)) << id;
  // The chunks are B's own now, in its host tier.
  EXPECT_EQ(b_->store().LocatePrefix(chain), std::vector<Tier>(8, Tier::kHost));
  const LowerTierStats stats = b_->remote().Stats();
  EXPECT_EQ(stats.reads, 8u);
  EXPECT_EQ(stats.read_bytes, 8 * b_->ChunkBytes());
  EXPECT_EQ(stats.chunks, 8u) << "what A said it holds is remembered";
  EXPECT_EQ(stats.payload_bytes, 8 * b_->ChunkBytes());
  EXPECT_EQ(stats.checksum_failures, 0u);
  EXPECT_EQ(a_->server().Stats().chunks_leased, 8u);
  // B let A's leases go.
  for (int i = 0; i < 500 && a_->server().Stats().lease_sets_held > 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(a_->server().Stats().lease_sets_held, 0u);
}

// A fetch timeout longer than the lease a peer grants (30 s) asks for a longer lease: the peer
// grants its longest instead of refusing the fetch.
TEST_F(RemoteTierTest, ALongerFetchTimeoutThanThePeersLongestLeaseStillLoads) {
  Start(/*faulty=*/false, 2s, /*fetch_timeout=*/60s);
  for (uint64_t id = 0; id < 2; ++id) a_->Store(id);
  const std::vector<ChunkKey> chain = b_->Chain(2);
  EXPECT_EQ(b_->Query(chain), 2u);
  LoadLeases loaded = b_->Load(chain);
  ASSERT_TRUE(loaded.failure.ok()) << loaded.failure;
  ASSERT_EQ(loaded.leases.size(), 2u);
  for (uint64_t id = 0; id < 2; ++id) EXPECT_TRUE(b_->Holds(loaded.leases[id], id)) << id;
}

TEST_F(RemoteTierTest, TheStoreLocatesRemoteChunksByAskingThePeers) {
  Start();
  for (uint64_t id = 0; id < 6; ++id) a_->Store(id);
  b_->Store(0);
  b_->Store(1);
  const std::vector<ChunkKey> chain = b_->Chain(8);
  absl::Notification done;
  std::vector<Tier> later;
  std::optional<std::vector<Tier>> now =
      b_->store().LocatePrefixOrAsk(chain, [&](std::vector<Tier> tiers) {
        later = std::move(tiers);
        done.Notify();
      });
  // Usually answered later; at once when the peer answered before the call returned.
  if (!now.has_value()) {
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    now = std::move(later);
  }
  EXPECT_EQ(*now, (std::vector<Tier>{Tier::kHost, Tier::kHost, Tier::kRemote, Tier::kRemote,
                                     Tier::kRemote, Tier::kRemote}));
  // A chain the host tier covers is answered at once, without asking.
  std::optional<std::vector<Tier>> covered =
      b_->store().LocatePrefixOrAsk(b_->Chain(2), [](std::vector<Tier>) { FAIL(); });
  ASSERT_TRUE(covered.has_value());
  EXPECT_EQ(covered->size(), 2u);
}

TEST_F(RemoteTierTest, APeerHoldingAPrefixIsCountedToItsEnd) {
  Start();
  for (uint64_t id = 0; id < 3; ++id) a_->Store(id);
  a_->Store(5);  // not contiguous with the prefix: not counted
  const std::vector<ChunkKey> chain = b_->Chain(8);
  EXPECT_EQ(b_->Query(chain), 3u);
  LoadLeases loaded = b_->Load(chain);
  EXPECT_EQ(loaded.leases.size(), 3u);
  EXPECT_EQ(loaded.failure.code(), absl::StatusCode::kAborted) << loaded.failure;
  EXPECT_EQ(b_->Query(b_->Chain(0)), 0u);
}

TEST_F(RemoteTierTest, CorruptedBytesAreDataLossAndNothingIsCommitted) {
  Start(/*faulty=*/true);
  for (uint64_t id = 0; id < 4; ++id) a_->Store(id);
  const std::vector<ChunkKey> chain = b_->Chain(4);
  ASSERT_EQ(b_->Query(chain), 4u);
  b_->faults().AddRule({.kind = FaultKind::kCorrupt, .requests = RequestKind::kRead, .count = 1});
  LoadLeases loaded = b_->Load(chain);
  EXPECT_TRUE(loaded.leases.empty());
  EXPECT_EQ(loaded.failure.code(), absl::StatusCode::kDataLoss) << loaded.failure;
  EXPECT_FALSE(b_->store().host().Contains(chain[0]));
  EXPECT_EQ(b_->remote().Stats().checksum_failures, 1u);
  EXPECT_EQ(b_->faults().counts().corrupted, 1u);
  // The corrupt chunk was forgotten; asked again, the peer's good copy loads.
  ASSERT_EQ(b_->Query(chain), 4u);
  LoadLeases again = b_->Load(chain);
  ASSERT_TRUE(again.failure.ok()) << again.failure;
  for (uint64_t id = 0; id < 4; ++id) EXPECT_TRUE(b_->Holds(again.leases[id], id)) << id;
}

TEST_F(RemoteTierTest, ALinkCutMidFetchFailsTheLoadAndCommitsNothing) {
  Start(/*faulty=*/true);
  for (uint64_t id = 0; id < 4; ++id) a_->Store(id);
  const std::vector<ChunkKey> chain = b_->Chain(4);
  ASSERT_EQ(b_->Query(chain), 4u);
  b_->faults().AddRule({.kind = FaultKind::kCut, .requests = RequestKind::kRead, .count = 1});
  LoadLeases loaded = b_->Load(chain);
  EXPECT_TRUE(loaded.leases.empty());
  EXPECT_EQ(loaded.failure.code(), absl::StatusCode::kUnavailable) << loaded.failure;
  for (const ChunkKey& key : chain) EXPECT_FALSE(b_->store().host().Contains(key));
  EXPECT_GE(b_->remote().Stats().io_errors, 1u);
}

TEST_F(RemoteTierTest, APeerThatNeverAnswersCostsTheLookupItsBudgetAndNoHits) {
  Start(/*faulty=*/true, /*budget=*/50ms);
  for (uint64_t id = 0; id < 4; ++id) a_->Store(id);
  b_->faults().AddRule({.kind = FaultKind::kDrop, .requests = RequestKind::kCall, .count = 1});
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(b_->Query(b_->Chain(4)), 0u);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 50ms);
  EXPECT_LT(took, 1s);
  EXPECT_EQ(b_->store().LocatePrefix(b_->Chain(4)), std::vector<Tier>{});
}

// A's chunks went to its disk (two of them; two are still in its host tier): B finds all four
// and loads them byte-exact; A promotes the disk-held ones for B's lease first.
TEST_F(RemoteTierTest, ChunksThePeerHoldsOnlyOnDiskAreFoundAndLoaded) {
  Start(/*faulty=*/false, 2s, 3s, /*a_has_disk=*/true);
  for (uint64_t id = 0; id < 4; ++id) a_->Store(id);
  const std::vector<ChunkKey> chain = b_->Chain(4);
  const std::vector<ChunkKey> on_disk(chain.begin() + 2, chain.end());
  auto moved = a_->store().Move(on_disk, Tier::kDisk, layout_.get());
  ASSERT_TRUE(moved.ok()) << moved.status();
  ASSERT_EQ(a_->store().LocatePrefix(chain),
            std::vector<Tier>({Tier::kHost, Tier::kHost, Tier::kDisk, Tier::kDisk}));

  EXPECT_EQ(b_->Query(chain), 4u);
  LoadLeases loaded = b_->Load(chain);
  ASSERT_TRUE(loaded.failure.ok()) << loaded.failure;
  ASSERT_EQ(loaded.leases.size(), 4u);
  for (uint64_t id = 0; id < 4; ++id) EXPECT_TRUE(b_->Holds(loaded.leases[id], id)) << id;
  EXPECT_EQ(a_->server().Stats().leases_promoted, 1u);
  EXPECT_EQ(a_->store().Stats().movement.peer_promoted, 2u);
  EXPECT_TRUE(a_->store().host().Contains(chain[3])) << "promoted on A";
}

// A chunk A holds compressed is described and served as it decodes: A decodes it back in place
// before B reads it, so no peer ever reads a frame.
TEST_F(RemoteTierTest, ChunksThePeerHoldsCompressedAreServedAsTheyDecode) {
  Start();
  for (uint64_t id = 0; id < 3; ++id) a_->Store(id);
  const std::vector<ChunkKey> chain = b_->Chain(3);
  auto compressed =
      a_->store().Recode({&chain[1], 1}, Tier::kHost,
                         {.codec = *CodecRegistry::Find("int8"), .layout = layout_.get()});
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  ASSERT_EQ(compressed->recoded, 1u);
  ASSERT_TRUE(a_->store().host().HoldsEncoded(chain[1]));
  // What it decodes to: the codec's decode of the chunk A stored.
  const Codec& int8 = **CodecRegistry::Find("int8");
  std::vector<std::byte> decoded(b_->ChunkBytes());
  ASSERT_TRUE(
      int8.Decode(*layout_,
                  *int8.Encode(*layout_, layout_->chunk_tokens, Pattern(1, b_->ChunkBytes()), {}),
                  decoded)
          .ok());

  EXPECT_EQ(b_->Query(chain), 3u);
  LoadLeases loaded = b_->Load(chain);
  ASSERT_TRUE(loaded.failure.ok()) << loaded.failure;
  ASSERT_EQ(loaded.leases.size(), 3u);
  EXPECT_TRUE(b_->Holds(loaded.leases[0], 0));
  EXPECT_TRUE(b_->Holds(loaded.leases[2], 2));
  std::vector<std::byte> fetched(loaded.leases[1].size_bytes());
  loaded.leases[1].payload().CopyTo(fetched);
  EXPECT_EQ(fetched, decoded);
  EXPECT_EQ(loaded.leases[1].checksum(), ChecksumBytes(decoded));
  EXPECT_EQ(a_->server().Stats().leases_promoted, 1u);
  EXPECT_EQ(a_->store().Stats().movement.load_decoded, 1u);
  EXPECT_FALSE(a_->store().host().HoldsEncoded(chain[1])) << "decoded back in place on A";
}

// A chunk A holds nowhere (neither tier) ends the run, disk tier or not.
TEST_F(RemoteTierTest, AChunkOnNoTierOfThePeerEndsItsRun) {
  Start(/*faulty=*/false, 2s, 3s, /*a_has_disk=*/true);
  for (uint64_t id : {0, 1, 3}) a_->Store(id);
  const std::vector<ChunkKey> chain = b_->Chain(4);
  ASSERT_TRUE(a_->store().Move({&chain[1], 1}, Tier::kDisk, layout_.get()).ok());
  EXPECT_EQ(b_->Query(chain), 2u);
  EXPECT_EQ(a_->store().DescribeBelowHost(chain[2]), std::nullopt);
  EXPECT_TRUE(a_->store().DescribeBelowHost(chain[1]).has_value());
}

TEST_F(RemoteTierTest, AChunkThePeerLostMeanwhileFailsAlone) {
  Start();
  for (uint64_t id = 0; id < 4; ++id) a_->Store(id);
  const std::vector<ChunkKey> chain = b_->Chain(4);
  ASSERT_EQ(b_->Query(chain), 4u);
  ASSERT_TRUE(a_->store().host().Remove(chain[2]).ok());
  LoadLeases loaded = b_->Load(chain);
  ASSERT_EQ(loaded.leases.size(), 2u);
  EXPECT_TRUE(b_->Holds(loaded.leases[0], 0));
  EXPECT_TRUE(b_->Holds(loaded.leases[1], 1));
  EXPECT_EQ(loaded.failure.code(), absl::StatusCode::kAborted) << loaded.failure;
  EXPECT_FALSE(b_->store().host().Contains(chain[2]));
}

}  // namespace
}  // namespace strata::storage::remote
