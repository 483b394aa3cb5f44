// PeerSet over real UcxTransports (tcp on lo): admission by handshake, refusal of a wrong secret,
// health checks that drop a silent peer, redial after a peer comes back, join and leave.
#include "storage/remote/peer_set.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "absl/synchronization/notification.h"
#include "storage/remote/fault_injecting_transport.h"
#include "storage/remote/peer_messages.h"
#include "storage/remote/ucx_transport.h"

namespace strata::storage::remote {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kLayout = 0xabcdef;

// A daemon's remote side: a region, a PeerSet and the transport it runs over (optionally seen
// through a fault injector).
class Node {
 public:
  Node(PeerSetOptions options, std::string listen, bool faulty = false,
       std::string secret = "token") {
    options.connect_timeout = 1s;
    options.handshake_timeout = 300ms;
    options.health_interval = 50ms;
    options.health_timeout = 100ms;
    options.redial_min = 20ms;
    options.redial_max = 200ms;
    peers_ = std::make_unique<PeerSet>(std::move(options));
    UcxTransportOptions transport_options;
    transport_options.region = region_;
    transport_options.cluster_secret = std::move(secret);
    transport_options.listen_address = std::move(listen);
    transport_options.transports = "tcp";
    transport_options.net_devices = "lo";
    transport_options.handlers = peers_->TransportHandlers();
    auto created = UcxTransport::Create(std::move(transport_options));
    EXPECT_TRUE(created.ok()) << created.status();
    transport_ = std::move(*created);
    if (faulty) faults_ = std::make_unique<FaultInjectingTransport>(*transport_);
    peers_->Start(faults_ ? static_cast<Transport*>(faults_.get()) : transport_.get());
  }

  ~Node() {
    peers_->Stop();
    faults_.reset();
    transport_.reset();
  }

  PeerSet& peers() { return *peers_; }
  UcxTransport& transport() { return *transport_; }
  FaultInjectingTransport& faults() { return *faults_; }
  std::string address() const { return transport_->listen_address(); }

 private:
  std::vector<std::byte> region_ = std::vector<std::byte>(1u << 20);
  std::unique_ptr<PeerSet> peers_;
  std::unique_ptr<UcxTransport> transport_;
  std::unique_ptr<FaultInjectingTransport> faults_;
};

PeerSetOptions Options(std::string node_id, std::vector<std::string> dial = {}) {
  PeerSetOptions options;
  options.node_id = std::move(node_id);
  options.layouts = {kLayout};
  options.peers = std::move(dial);
  return options;
}

// Waits up to 10 s for `condition`.
bool Eventually(const std::function<bool()>& condition) {
  for (int i = 0; i < 1000; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

bool UpWith(const PeerSet& peers, std::string_view node_id) {
  for (const PeerInfo& peer : peers.List()) {
    if (peer.state == PeerState::kUp && peer.node_id == node_id) return true;
  }
  return false;
}

TEST(PeerSetTest, PeersWithTheSecretAreAdmittedBothWays) {
  Node a(Options("a"), "127.0.0.1:0");
  Node b(Options("b", {a.address()}), "127.0.0.1:0");
  ASSERT_TRUE(Eventually([&] { return UpWith(b.peers(), "a") && UpWith(a.peers(), "b"); }));
  const std::vector<PeerInfo> from_b = b.peers().List();
  ASSERT_EQ(from_b.size(), 1u);
  EXPECT_TRUE(from_b[0].outbound);
  EXPECT_EQ(from_b[0].address, a.address());
  EXPECT_EQ(from_b[0].layouts, std::vector<uint64_t>{kLayout});
  EXPECT_EQ(b.peers().PeersServing(kLayout), std::vector<PeerId>{from_b[0].id});
  EXPECT_TRUE(b.peers().PeersServing(kLayout + 1).empty());
  EXPECT_TRUE(b.peers().Admitted(from_b[0].id));
  EXPECT_EQ(a.peers().PeersServing(kLayout).size(), 1u);
}

TEST(PeerSetTest, AWrongSecretIsRefusedAndNeverAdmitted) {
  Node a(Options("a"), "127.0.0.1:0");
  Node b(Options("b", {a.address()}), "", /*faulty=*/false, "not-the-secret");
  ASSERT_TRUE(Eventually([&] {
    const auto peers = b.peers().List();
    return peers.size() == 1 && peers[0].last_error.find("cluster's secret") != std::string::npos;
  }));
  EXPECT_TRUE(b.peers().PeersServing(kLayout).empty());
  EXPECT_TRUE(a.peers().PeersServing(kLayout).empty());
  for (const PeerInfo& peer : a.peers().List()) EXPECT_NE(peer.state, PeerState::kUp);
}

TEST(PeerSetTest, ALinkThatNeverHandshakesIsRefusedCallsAndClosed) {
  Node a(Options("a"), "127.0.0.1:0");
  std::vector<std::byte> region(1u << 20);
  UcxTransportOptions raw_options;
  raw_options.region = region;
  raw_options.cluster_secret = "token";
  raw_options.transports = "tcp";
  raw_options.net_devices = "lo";
  auto raw = UcxTransport::Create(std::move(raw_options));
  ASSERT_TRUE(raw.ok()) << raw.status();
  auto link = (*raw)->Connect(a.address(), 5s);
  ASSERT_TRUE(link.ok()) << link.status();
  absl::Notification answered;
  absl::Status status;
  std::string request(1, static_cast<char>(kFirstApplicationMessage));
  (*raw)->Call(*link, request, std::chrono::steady_clock::now() + 5s,
               [&](absl::StatusOr<std::string> reply) {
                 status = reply.status();
                 answered.Notify();
               });
  ASSERT_TRUE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  // The listener closes it after its handshake timeout.
  EXPECT_TRUE(Eventually([&] {
    const auto peers = (*raw)->Peers();
    return peers.empty() || !peers[0].up;
  }));
}

TEST(PeerSetTest, ASilentPeerIsDroppedAndRedialled) {
  Node a(Options("a"), "127.0.0.1:0");
  Node b(Options("b", {a.address()}), "", /*faulty=*/true);
  ASSERT_TRUE(Eventually([&] { return UpWith(b.peers(), "a"); }));
  const PeerId first = b.peers().List().at(0).id;
  // Pings vanish (a peer that stopped answering); after three the link is dropped.
  b.faults().AddRule({.kind = FaultKind::kDrop, .requests = RequestKind::kCall, .count = 3});
  ASSERT_TRUE(Eventually([&] {
    const auto peers = b.peers().List();
    return peers.size() == 1 && peers[0].id != first;
  }));
  EXPECT_GE(b.faults().counts().dropped, 3u);
  // With the fault gone it is redialled and admitted again, on a new link.
  EXPECT_TRUE(Eventually([&] { return UpWith(b.peers(), "a"); }));
  EXPECT_NE(b.peers().List().at(0).id, first);
}

TEST(PeerSetTest, APeerThatRestartsIsRedialled) {
  auto a = std::make_unique<Node>(Options("a"), "127.0.0.1:0");
  const std::string address = a->address();
  Node b(Options("b", {address}), "");
  ASSERT_TRUE(Eventually([&] { return UpWith(b.peers(), "a"); }));
  a.reset();
  ASSERT_TRUE(Eventually([&] {
    const auto peers = b.peers().List();
    return peers.size() == 1 && peers[0].state != PeerState::kUp && !peers[0].last_error.empty();
  }));
  EXPECT_TRUE(b.peers().PeersServing(kLayout).empty());
  a = std::make_unique<Node>(Options("a2"), address);
  EXPECT_TRUE(Eventually([&] { return UpWith(b.peers(), "a2"); }));
}

TEST(PeerSetTest, PeersJoinAndLeaveAtRunTime) {
  Node a(Options("a"), "127.0.0.1:0");
  Node c(Options("c"), "127.0.0.1:0");
  Node b(Options("b", {a.address()}), "");
  ASSERT_TRUE(Eventually([&] { return UpWith(b.peers(), "a"); }));
  b.peers().AddPeer(c.address());
  b.peers().AddPeer(c.address());  // once is enough
  ASSERT_TRUE(Eventually([&] { return UpWith(b.peers(), "c"); }));
  EXPECT_EQ(b.peers().List().size(), 2u);
  EXPECT_EQ(b.peers().PeersServing(kLayout).size(), 2u);
  b.peers().RemovePeer(a.address());
  EXPECT_EQ(b.peers().List().size(), 1u);
  EXPECT_FALSE(UpWith(b.peers(), "a"));
  EXPECT_TRUE(Eventually([&] { return !UpWith(a.peers(), "b"); }));
}

TEST(PeerSetTest, APeerThatDialledInIsNotDialledBackWhileItsLinkIsUp) {
  Node a(Options("a"), "127.0.0.1:0");
  Node b(Options("b"), "127.0.0.1:0");
  a.peers().AddPeer(b.address());
  ASSERT_TRUE(Eventually([&] { return UpWith(b.peers(), "a"); }));
  // b is told to dial a too: a's link serves both ways, so b holds its dial.
  b.peers().AddPeer(a.address());
  std::this_thread::sleep_for(300ms);
  std::vector<PeerInfo> listed = b.peers().List();
  ASSERT_EQ(listed.size(), 2u);  // the held dial and a's inbound link
  EXPECT_EQ(b.peers().PeersServing(kLayout).size(), 1u);
  for (const PeerInfo& peer : listed) {
    if (peer.outbound) {
      EXPECT_EQ(peer.id, 0u) << "b dialled a although a's link is up";
    }
  }
  // Once a's link goes, b dials a itself.
  a.peers().RemovePeer(b.address());
  ASSERT_TRUE(Eventually([&] {
    for (const PeerInfo& peer : b.peers().List()) {
      if (peer.outbound && peer.state == PeerState::kUp && peer.node_id == "a") return true;
    }
    return false;
  }));
}

TEST(PeerSetTest, TheClusterMembershipAddsAndDropsPeersButKeepsConfiguredOnes) {
  Node a(Options("a"), "127.0.0.1:0");
  Node c(Options("c"), "127.0.0.1:0");
  Node d(Options("d"), "127.0.0.1:0");
  Node b(Options("b", {a.address()}), "");
  // The membership names the configured peer too: it stays when the membership drops it.
  b.peers().SetClusterPeers({c.address(), a.address(), c.address()});
  ASSERT_TRUE(Eventually([&] { return UpWith(b.peers(), "a") && UpWith(b.peers(), "c"); }));
  EXPECT_EQ(b.peers().List().size(), 2u);
  b.peers().SetClusterPeers({d.address()});
  ASSERT_TRUE(Eventually([&] { return UpWith(b.peers(), "d"); }));
  EXPECT_FALSE(UpWith(b.peers(), "c"));
  EXPECT_TRUE(UpWith(b.peers(), "a"));
  EXPECT_EQ(b.peers().List().size(), 2u);
  EXPECT_TRUE(Eventually([&] { return !UpWith(c.peers(), "b"); }));
  b.peers().SetClusterPeers({});
  EXPECT_EQ(b.peers().List().size(), 1u);
  EXPECT_TRUE(UpWith(b.peers(), "a"));
}

}  // namespace
}  // namespace strata::storage::remote
