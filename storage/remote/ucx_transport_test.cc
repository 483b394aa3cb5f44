// UcxTransport over real UCX: two transports in this process (each with its own context, worker
// and progress thread) talk over tcp on lo or over shared memory, on both data paths; one test
// runs the peer in a child process and kills it mid-transfer.
#include "storage/remote/ucx_transport.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "absl/synchronization/notification.h"
#include "fmt/format.h"

namespace strata::storage::remote {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kRegionBytes = 16u << 20;

struct LinkConfig {
  const char* name;
  const char* transports;
  const char* net_devices;
  DataPath data_path;
};

std::string PrintConfig(const testing::TestParamInfo<LinkConfig>& info) { return info.param.name; }

// A request's outcome, waited for with a bound.
struct Outcome {
  absl::Notification done;
  absl::Status status;
  std::string reply;

  Transport::Completion Completion() {
    return [this](absl::Status result) {
      status = std::move(result);
      done.Notify();
    };
  }
  Transport::Reply Reply() {
    return [this](absl::StatusOr<std::string> result) {
      status = result.status();
      if (result.ok()) reply = std::move(*result);
      done.Notify();
    };
  }
  absl::Status Wait(absl::Duration limit = absl::Seconds(20)) {
    if (!done.WaitForNotificationWithTimeout(limit)) {
      return absl::InternalError("test: the request did not complete in time");
    }
    return status;
  }
};

Deadline In(std::chrono::milliseconds delay) { return std::chrono::steady_clock::now() + delay; }

void Fill(std::span<std::byte> bytes, uint8_t seed) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
  }
}

class UcxTransportTest : public testing::TestWithParam<LinkConfig> {
 protected:
  // A transport over its own region.
  struct Node {
    std::vector<std::byte> region = std::vector<std::byte>(kRegionBytes);
    std::unique_ptr<UcxTransport> transport;
  };

  UcxTransportOptions Options(Node& node, bool listen, std::string secret = "cluster secret") {
    UcxTransportOptions options;
    options.region = node.region;
    options.cluster_secret = std::move(secret);
    options.listen_address = listen ? "127.0.0.1:0" : "";
    options.transports = GetParam().transports;
    options.net_devices = GetParam().net_devices;
    options.data_path = GetParam().data_path;
    return options;
  }

  void Start(Node& node, bool listen, Transport::Handlers handlers = {},
             uint64_t read_window_bytes = 0) {
    UcxTransportOptions options = Options(node, listen);
    options.handlers = std::move(handlers);
    if (read_window_bytes != 0) options.read_window_bytes = read_window_bytes;
    auto created = UcxTransport::Create(std::move(options));
    ASSERT_TRUE(created.ok()) << created.status();
    node.transport = std::move(*created);
  }

  PeerId Dial(Node& from, const Node& to) {
    auto peer = from.transport->Connect(to.transport->listen_address(), 10s);
    EXPECT_TRUE(peer.ok()) << peer.status();
    return peer.value_or(0);
  }
};

TEST_P(UcxTransportTest, ReadsLandByteExact) {
  Node server;
  Node client;
  Start(server, /*listen=*/true);
  Start(client, /*listen=*/false);
  ASSERT_FALSE(server.transport->listen_address().empty());
  const PeerId peer = Dial(client, server);
  ASSERT_NE(peer, 0u);

  // Pieces of several sizes, as a chunk's pages are: large (rendezvous), small (eager), odd.
  Fill(server.region, 7);
  const std::vector<Segment> reads = {
      {.remote_offset = 0, .local = std::span(client.region).subspan(4u << 20, 2u << 20)},
      {.remote_offset = 6u << 20, .local = std::span(client.region).subspan(0, 100)},
      {.remote_offset = 3, .local = std::span(client.region).subspan(8u << 20, 65537)},
  };
  Outcome read;
  client.transport->Read(peer, reads, In(10s), read.Completion());
  ASSERT_TRUE(read.Wait().ok()) << read.status;
  for (const Segment& segment : reads) {
    EXPECT_EQ(0, std::memcmp(segment.local.data(), server.region.data() + segment.remote_offset,
                             segment.local.size()));
  }

  const std::vector<PeerStats> peers = client.transport->Peers();
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_TRUE(peers[0].up);
  EXPECT_TRUE(peers[0].outbound);
  EXPECT_EQ(peers[0].bytes_read, (2u << 20) + 100 + 65537);
  EXPECT_NE(peers[0].data_path, DataPath::kAuto);
  if (GetParam().data_path != DataPath::kAuto) {
    EXPECT_EQ(peers[0].data_path, GetParam().data_path);
  }
}

TEST_P(UcxTransportTest, ReadsPastTheReadWindowLandWhileCallsGoBetweenThem) {
  Node server;
  Node client;
  Start(server, /*listen=*/true,
        {.on_call = [](PeerId, std::string request, Transport::Reply reply) {
          std::move(reply)("echo " + request);
        }});
  // A window of 1 MiB: four reads of 4.5 MiB each wait for it, one of them with a segment
  // larger than the window (which goes alone).
  Start(client, /*listen=*/false, {}, /*read_window_bytes=*/1u << 20);
  const PeerId peer = Dial(client, server);
  ASSERT_NE(peer, 0u);
  Fill(server.region, 21);
  std::vector<std::vector<Segment>> reads(4);
  for (size_t r = 0; r < reads.size(); ++r) {
    const uint64_t base = r * (4u << 20);
    if (r == 3) {
      reads[r].push_back(
          {.remote_offset = 1000, .local = std::span(client.region).subspan(base, 3u << 20)});
      continue;
    }
    for (uint64_t at = 0; at < (3u << 20); at += 512u << 10) {
      reads[r].push_back({.remote_offset = base + at + 5,
                          .local = std::span(client.region).subspan(base + at, 512u << 10)});
    }
  }
  std::vector<Outcome> outcomes(reads.size());
  for (size_t r = 0; r < reads.size(); ++r) {
    client.transport->Read(peer, reads[r], In(20s), outcomes[r].Completion());
  }
  Outcome call;
  client.transport->Call(peer, "ping", In(10s), call.Reply());
  ASSERT_TRUE(call.Wait().ok()) << call.status;
  EXPECT_EQ(call.reply, "echo ping");
  for (size_t r = 0; r < reads.size(); ++r) {
    ASSERT_TRUE(outcomes[r].Wait().ok()) << "read " << r << ": " << outcomes[r].status;
    for (const Segment& segment : reads[r]) {
      EXPECT_EQ(0, std::memcmp(segment.local.data(), server.region.data() + segment.remote_offset,
                               segment.local.size()))
          << "read " << r;
    }
  }
  // Nothing is left in the window: one more read goes at once.
  Outcome again;
  client.transport->Read(peer, reads[0], In(10s), again.Completion());
  EXPECT_TRUE(again.Wait().ok()) << again.status;
}

TEST_P(UcxTransportTest, CallsAreAnsweredSyncAsyncAndWithErrors) {
  Node server;
  Node client;
  std::vector<std::jthread> repliers;
  Transport::Handlers handlers;
  handlers.on_call = [&](PeerId, std::string request, Transport::Reply reply) {
    if (request == "fail") {
      std::move(reply)(absl::ResourceExhaustedError("no room"));
    } else if (request.starts_with("later")) {
      repliers.emplace_back([reply = std::move(reply), request]() mutable {
        std::this_thread::sleep_for(5ms);
        std::move(reply)(fmt::format("answered {}", request));
      });
    } else {
      std::move(reply)(std::string(request.rbegin(), request.rend()));
    }
  };
  Start(server, true, std::move(handlers));
  Start(client, false);
  const PeerId peer = Dial(client, server);

  Outcome echo;
  client.transport->Call(peer, "abc", In(10s), echo.Reply());
  ASSERT_TRUE(echo.Wait().ok()) << echo.status;
  EXPECT_EQ(echo.reply, "cba");

  Outcome later;
  client.transport->Call(peer, "later", In(10s), later.Reply());
  ASSERT_TRUE(later.Wait().ok()) << later.status;
  EXPECT_EQ(later.reply, "answered later");

  Outcome failed;
  client.transport->Call(peer, "fail", In(10s), failed.Reply());
  EXPECT_EQ(failed.Wait().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(failed.status.message(), "no room");

  // A request and a reply too large for one eager message travel by rendezvous.
  std::string big(3u << 20, 'x');
  big[12345] = 'y';
  Outcome large;
  client.transport->Call(peer, big, In(10s), large.Reply());
  ASSERT_TRUE(large.Wait().ok()) << large.status;
  EXPECT_EQ(large.reply, std::string(big.rbegin(), big.rend()));
}

TEST_P(UcxTransportTest, EitherSideMayCallTheOther) {
  Node server;
  Node client;
  std::atomic<PeerId> inbound{0};
  Transport::Handlers server_handlers;
  server_handlers.on_peer_up = [&](PeerId id, std::string_view) { inbound = id; };
  Start(server, true, std::move(server_handlers));
  Transport::Handlers client_handlers;
  client_handlers.on_call = [](PeerId, std::string request, Transport::Reply reply) {
    std::move(reply)(fmt::format("client saw {}", request));
  };
  Start(client, false, std::move(client_handlers));
  Dial(client, server);
  for (int i = 0; i < 200 && inbound == 0; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_NE(inbound.load(), 0u);
  Outcome back;
  server.transport->Call(inbound, "ping", In(10s), back.Reply());
  ASSERT_TRUE(back.Wait().ok()) << back.status;
  EXPECT_EQ(back.reply, "client saw ping");
  // The server reads the client's region too.
  Fill(client.region, 3);
  const std::vector<Segment> segments = {
      {.remote_offset = 4096, .local = std::span(server.region).subspan(0, 1u << 20)}};
  Outcome read;
  server.transport->Read(inbound, segments, In(10s), read.Completion());
  ASSERT_TRUE(read.Wait().ok()) << read.status;
  EXPECT_EQ(0, std::memcmp(server.region.data(), client.region.data() + 4096, 1u << 20));
}

TEST_P(UcxTransportTest, SegmentsOutsideEitherRegionAreRefused) {
  Node server;
  Node client;
  Start(server, true);
  Start(client, false);
  const PeerId peer = Dial(client, server);
  std::vector<std::byte> outside(64);
  const std::vector<std::vector<Segment>> bad = {
      {{.remote_offset = 0, .local = outside}},
      {{.remote_offset = kRegionBytes - 10, .local = std::span(client.region).subspan(0, 11)}},
      {{.remote_offset = ~uint64_t{0} - 4, .local = std::span(client.region).subspan(0, 8)}},
      {{.remote_offset = 0, .local = std::span(client.region).subspan(0, 0)}},
  };
  for (const auto& segments : bad) {
    Outcome read;
    client.transport->Read(peer, segments, In(10s), read.Completion());
    EXPECT_EQ(read.Wait().code(), absl::StatusCode::kInvalidArgument) << read.status;
  }
  // The link still serves good requests.
  Outcome good;
  client.transport->Read(peer, {{{.remote_offset = 0, .local = std::span(client.region).first(8)}}},
                         In(10s), good.Completion());
  EXPECT_TRUE(good.Wait().ok()) << good.status;
}

TEST_P(UcxTransportTest, UnansweredCallsEndAtTheirDeadlineOrWhenCancelled) {
  Node server;
  Node client;
  std::vector<Transport::Reply> held;
  absl::Mutex held_mu;
  Transport::Handlers handlers;
  handlers.on_call = [&](PeerId, std::string, Transport::Reply reply) {
    absl::MutexLock lock(&held_mu);
    held.push_back(std::move(reply));
  };
  Start(server, true, std::move(handlers));
  Start(client, false);
  const PeerId peer = Dial(client, server);

  Outcome timed_out;
  const auto start = std::chrono::steady_clock::now();
  client.transport->Call(peer, "never", In(50ms), timed_out.Reply());
  EXPECT_EQ(timed_out.Wait().code(), absl::StatusCode::kDeadlineExceeded);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 50ms);
  EXPECT_LT(took, 2s);

  Outcome cancelled;
  const RequestId id = client.transport->Call(peer, "never", In(60s), cancelled.Reply());
  client.transport->Cancel(id);
  EXPECT_EQ(cancelled.Wait().code(), absl::StatusCode::kCancelled);

  // A late reply to a finished call is dropped; the link keeps working.
  {
    absl::MutexLock lock(&held_mu);
    for (auto& reply : held) std::move(reply)(std::string("late"));
    held.clear();
  }
  Outcome after;
  client.transport->Read(peer, {{{.remote_offset = 0, .local = std::span(client.region).first(8)}}},
                         In(10s), after.Completion());
  EXPECT_TRUE(after.Wait().ok()) << after.status;
}

TEST_P(UcxTransportTest, UnknownPeersAndDeadAddressesFailFast) {
  Node client;
  Start(client, false);
  Outcome unknown;
  client.transport->Call(12345, "x", In(10s), unknown.Reply());
  EXPECT_EQ(unknown.Wait().code(), absl::StatusCode::kUnavailable);

  // A port nobody listens on (bound and closed by the test, so nothing else holds it now).
  Node ghost;
  Start(ghost, true);
  const std::string address = ghost.transport->listen_address();
  ghost.transport.reset();
  const auto start = std::chrono::steady_clock::now();
  auto peer = client.transport->Connect(address, 3s);
  EXPECT_FALSE(peer.ok());
  EXPECT_TRUE(peer.status().code() == absl::StatusCode::kUnavailable ||
              peer.status().code() == absl::StatusCode::kDeadlineExceeded)
      << peer.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(client.transport->Connect("not-an-address", 1s).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(UcxTransportTest, APeerThatGoesAwayFailsItsRequestsAndIsReported) {
  Node server;
  Node client;
  // Written on the server's transport thread; read here once that thread is joined.
  std::vector<Transport::Reply> held;
  absl::Notification call_held;
  Transport::Handlers server_handlers;
  server_handlers.on_call = [&](PeerId, std::string, Transport::Reply reply) {
    held.push_back(std::move(reply));
    if (!call_held.HasBeenNotified()) call_held.Notify();
  };
  Start(server, true, std::move(server_handlers));
  absl::Notification down;
  absl::Status why;
  Transport::Handlers client_handlers;
  client_handlers.on_peer_down = [&](PeerId, const absl::Status& status) {
    why = status;
    down.Notify();
  };
  Start(client, false, std::move(client_handlers));
  const PeerId peer = Dial(client, server);

  Outcome pending;
  client.transport->Call(peer, "hold", In(60s), pending.Reply());
  ASSERT_TRUE(call_held.WaitForNotificationWithTimeout(absl::Seconds(2)));
  server.transport.reset();  // the server goes away with the call unanswered
  EXPECT_EQ(pending.Wait().code(), absl::StatusCode::kUnavailable) << pending.status;
  ASSERT_TRUE(down.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(why.code(), absl::StatusCode::kUnavailable) << why;

  Outcome after;
  client.transport->Read(peer, {{{.remote_offset = 0, .local = std::span(client.region).first(8)}}},
                         In(10s), after.Completion());
  EXPECT_EQ(after.Wait().code(), absl::StatusCode::kUnavailable);
  const std::vector<PeerStats> peers = client.transport->Peers();
  ASSERT_EQ(peers.size(), 1u);
  EXPECT_FALSE(peers[0].up);
  EXPECT_FALSE(peers[0].last_error.empty());
  client.transport->Disconnect(peer);
  for (int i = 0; i < 400 && !client.transport->Peers().empty(); ++i) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(client.transport->Peers().empty());
}

TEST_P(UcxTransportTest, DestroyingTheTransportCancelsWhatIsInFlight) {
  Node server;
  Node client;
  Transport::Handlers handlers;
  // Written on the server's transport thread; read here once that thread is joined.
  std::vector<Transport::Reply> held;
  absl::Notification call_held;
  handlers.on_call = [&](PeerId, std::string, Transport::Reply reply) {
    held.push_back(std::move(reply));
    if (!call_held.HasBeenNotified()) call_held.Notify();
  };
  Start(server, true, std::move(handlers));
  Start(client, false);
  const PeerId peer = Dial(client, server);
  Outcome pending;
  client.transport->Call(peer, "hold", In(60s), pending.Reply());
  ASSERT_TRUE(call_held.WaitForNotificationWithTimeout(absl::Seconds(2)));
  client.transport.reset();
  EXPECT_EQ(pending.Wait(absl::Seconds(1)).code(), absl::StatusCode::kCancelled);
  // A reply through a transport that is gone is dropped, not a crash.
  server.transport.reset();
  for (auto& reply : held) std::move(reply)(std::string("too late"));
}

TEST_P(UcxTransportTest, AKilledPeerProcessFailsTheTransferInFlight) {
  int to_parent[2];
  int to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The peer: listens, says where, serves until killed. Its calls never answer, so the
    // parent's request is certainly in flight when the kill lands.
    Node peer;
    UcxTransportOptions options = Options(peer, true);
    options.handlers.on_call = [](PeerId, std::string, Transport::Reply reply) {
      static std::vector<Transport::Reply> held;
      held.push_back(std::move(reply));
    };
    auto created = UcxTransport::Create(std::move(options));
    if (!created.ok()) ::_exit(2);
    const std::string address = (*created)->listen_address();
    if (::write(to_parent[1], address.data(), address.size()) < 0) ::_exit(3);
    char byte;
    [[maybe_unused]] ssize_t got = ::read(to_child[0], &byte, 1);
    ::pause();
    ::_exit(0);
  }
  char address[128] = {};
  ASSERT_GT(::read(to_parent[0], address, sizeof(address) - 1), 0);
  Node client;
  Start(client, false);
  auto dialled = client.transport->Connect(address, 10s);
  ASSERT_TRUE(dialled.ok()) << dialled.status();
  Outcome call;
  client.transport->Call(*dialled, "hold", In(60s), call.Reply());
  std::this_thread::sleep_for(50ms);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(call.Wait().code(), absl::StatusCode::kUnavailable) << call.status;
  ::close(to_parent[0]);
  ::close(to_parent[1]);
  ::close(to_child[0]);
  ::close(to_child[1]);
}

TEST_P(UcxTransportTest, LinksComeUpOnlyBetweenHoldersOfTheSameSecret) {
  Node server;
  Node stranger;
  std::atomic<int> server_links_up{0};
  Start(server, true, {.on_peer_up = [&](PeerId, std::string_view) { ++server_links_up; }});
  {
    UcxTransportOptions options = Options(stranger, false, "another secret");
    auto created = UcxTransport::Create(std::move(options));
    ASSERT_TRUE(created.ok()) << created.status();
    stranger.transport = std::move(*created);
  }
  // Each end refuses the other's proof; the dialler learns why, not only that it timed out.
  auto refused = stranger.transport->Connect(server.transport->listen_address(), 10s);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_NE(refused.status().message().find("secret"), std::string::npos) << refused.status();
  EXPECT_EQ(server_links_up.load(), 0);
  // The server has closed the stranger's link (it says why) before the next link arrives.
  auto closed = [&] {
    const std::vector<PeerStats> links = server.transport->Peers();
    return !links.empty() && !links.front().last_error.empty();
  };
  for (int i = 0; i < 500 && !closed(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(closed());

  // The server goes on admitting holders of its secret.
  Node friendly;
  Start(friendly, false);
  const PeerId peer = Dial(friendly, server);
  Fill(server.region, 3);
  Outcome read;
  friendly.transport->Read(
      peer, {{{.remote_offset = 64, .local = std::span(friendly.region).subspan(0, 4096)}}},
      In(10s), read.Completion());
  ASSERT_TRUE(read.Wait().ok()) << read.status;
  EXPECT_EQ(0, std::memcmp(friendly.region.data(), server.region.data() + 64, 4096));
  EXPECT_EQ(server_links_up.load(), 1);
  // The stranger's failed link is forgotten once another arrives: refused attempts do not pile up.
  const std::vector<PeerStats> links = server.transport->Peers();
  ASSERT_EQ(links.size(), 1u);
  EXPECT_TRUE(links[0].up);
}

TEST_P(UcxTransportTest, ATransportWithoutASecretIsRefused) {
  Node node;
  auto created = UcxTransport::Create(Options(node, true, ""));
  EXPECT_EQ(created.status().code(), absl::StatusCode::kInvalidArgument) << created.status();
}

INSTANTIATE_TEST_SUITE_P(
    Links, UcxTransportTest,
    testing::Values(LinkConfig{"TcpAuto", "tcp", "lo", DataPath::kAuto},
                    LinkConfig{"TcpRma", "tcp", "lo", DataPath::kRma},
                    LinkConfig{"SharedMemoryAuto", "posix,cma,tcp", "", DataPath::kAuto},
                    LinkConfig{"SharedMemoryRma", "posix,cma,tcp", "", DataPath::kRma}),
    PrintConfig);

}  // namespace
}  // namespace strata::storage::remote
