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
#include "fmt/format.h"
#include "storage/host/test_util.h"
#include "storage/remote/fault_injecting_transport.h"
#include "storage/remote/peer_set.h"
#include "storage/remote/remote_server.h"
#include "storage/remote/ucx_transport.h"
#include "storage/tiered/tiered_store.h"

namespace strata::storage::remote {
namespace {

using namespace std::chrono_literals;
using testing::Pattern;
using testing::SyntheticKey;

// 64 tokens of 256 bytes: 16 KiB chunks over 4 KiB pages, so every read is several pieces.
std::shared_ptr<const KvLayout> TestLayout() {
  KvLayout layout = testing::SmallLayout("remote-test");
  layout.chunk_tokens = 64;
  return std::make_shared<const KvLayout>(layout);
}

class Daemon {
 public:
  struct Options {
    std::string node_id;
    std::vector<std::string> dial;
    bool remote_tier = false;
    bool faulty = false;
    bool disk = false;  // a disk tier under the host tier, served to peers
    std::chrono::microseconds lookup_budget = 2s;
    std::chrono::milliseconds fetch_timeout = 3s;
  };

  Daemon(Options options, std::shared_ptr<const KvLayout> layout) : layout_(std::move(layout)) {
    TieredStoreOptions store_options;
    store_options.host = {.capacity_bytes = 64 * ChunkBytes(),
                          .page_bytes = 4096,
                          .arena_name = "strata-remote-tier-test"};
    if (options.disk) {
      disk_dir_ = std::filesystem::temp_directory_path() /
                  fmt::format("strata-remote-tier-test-{}-{}", getpid(), options.node_id);
      store_options.disk = TieredDiskOptions{.directory = disk_dir_.string(),
                                             .capacity_bytes = 4ull << 20,
                                             .segment_bytes = 1ull << 20};
    }
    if (options.remote_tier) {
      auto tier = std::make_unique<RemoteTier>(RemoteTierOptions{
          .lookup_budget = options.lookup_budget, .fetch_timeout = options.fetch_timeout});
      remote_ = tier.get();
      store_options.lower.push_back(std::move(tier));
    }
    auto store = TieredStore::Create(std::move(store_options));
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    server_ = std::make_unique<RemoteServer>(store_->host(), ServingBelowHost(*store_));

    PeerSetOptions peer_options;
    peer_options.cluster_token = "token";
    peer_options.node_id = options.node_id;
    peer_options.layouts = {layout_->Fingerprint()};
    peer_options.peers = options.dial;
    peer_options.redial_min = 20ms;
    peer_options.on_call = [this](PeerId peer, std::string request, Transport::Reply reply) {
      server_->Handle(peer, std::move(request), std::move(reply));
    };
    peers_ = std::make_unique<PeerSet>(std::move(peer_options));

    UcxTransportOptions transport_options;
    transport_options.region = arena();
    transport_options.listen_address = "127.0.0.1:0";
    transport_options.transports = "tcp";
    transport_options.net_devices = "lo";
    transport_options.handlers = peers_->TransportHandlers();
    auto transport = UcxTransport::Create(std::move(transport_options));
    EXPECT_TRUE(transport.ok()) << transport.status();
    transport_ = std::move(*transport);
    Transport* used = transport_.get();
    if (options.faulty) {
      faults_ = std::make_unique<FaultInjectingTransport>(*transport_);
      used = faults_.get();
    }
    peers_->Start(used);
    if (remote_ != nullptr) remote_->Attach(used, peers_.get(), arena());
  }

  ~Daemon() {
    store_->Stop();
    peers_->Stop();
    faults_.reset();
    transport_.reset();
    peers_.reset();
    server_.reset();
    store_.reset();
    if (!disk_dir_.empty()) std::filesystem::remove_all(disk_dir_);
  }

  std::span<std::byte> arena() {
    return {store_->host().arena_base(), store_->host().arena_size_bytes()};
  }
  uint64_t ChunkBytes() const { return layout_->chunk_bytes(layout_->chunk_tokens); }
  std::string address() const { return transport_->listen_address(); }

  ChunkKey Key(uint64_t id) const { return SyntheticKey(*layout_, id); }
  std::vector<ChunkKey> Chain(uint64_t count) const {
    std::vector<ChunkKey> chain;
    for (uint64_t id = 0; id < count; ++id) chain.push_back(Key(id));
    return chain;
  }

  void Store(uint64_t id) {
    auto reserved = store_->host().Reserve(*layout_, Key(id), {.num_tokens = 64});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    reserved->reservation.payload().CopyFrom(Pattern(id, ChunkBytes()));
    ASSERT_TRUE(store_->host().Commit(std::move(reserved->reservation)).ok());
  }

  // Query's answer, waited for.
  size_t Query(std::vector<ChunkKey> chain) {
    absl::Notification done;
    size_t held = 0;
    remote_->Query(std::move(chain), [&](size_t prefix) {
      held = prefix;
      done.Notify();
    });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    return held;
  }

  // A load of `chain` through the store, waited for.
  LoadLeases Load(std::vector<ChunkKey> chain) {
    absl::Notification done;
    LoadLeases result;
    std::optional<LoadLeases> now =
        store_->AcquireForLoad(layout_, std::move(chain), {.owner = 7}, [&](LoadLeases leases) {
          result = std::move(leases);
          done.Notify();
        });
    if (now.has_value()) return std::move(*now);
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
    return result;
  }

  bool Holds(const ChunkLease& lease, uint64_t id) const {
    std::vector<std::byte> bytes(lease.size_bytes());
    lease.payload().CopyTo(bytes);
    return bytes == Pattern(id, ChunkBytes());
  }

  // Waits until this daemon has admitted a peer serving the layout.
  bool PeerUp() {
    for (int i = 0; i < 1000; ++i) {
      if (!peers_->PeersServing(layout_->Fingerprint()).empty()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  TieredStore& store() { return *store_; }
  RemoteTier& remote() { return *remote_; }
  RemoteServer& server() { return *server_; }
  FaultInjectingTransport& faults() { return *faults_; }

 private:
  std::shared_ptr<const KvLayout> layout_;
  std::unique_ptr<TieredStore> store_;
  RemoteTier* remote_ = nullptr;
  std::unique_ptr<RemoteServer> server_;
  std::unique_ptr<PeerSet> peers_;
  std::unique_ptr<UcxTransport> transport_;
  std::unique_ptr<FaultInjectingTransport> faults_;
  std::filesystem::path disk_dir_;
};

class RemoteTierTest : public ::testing::Test {
 protected:
  void Start(bool faulty = false, std::chrono::microseconds budget = 2s,
             std::chrono::milliseconds fetch_timeout = 3s, bool a_has_disk = false) {
    a_ = std::make_unique<Daemon>(Daemon::Options{.node_id = "a", .disk = a_has_disk}, layout_);
    b_ = std::make_unique<Daemon>(Daemon::Options{.node_id = "b",
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
  std::unique_ptr<Daemon> a_;
  std::unique_ptr<Daemon> b_;
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
