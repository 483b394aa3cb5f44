// stratad processes as peers over UCX (tcp on lo): a chunk stored through one daemon is found by
// another's engine Lookup and loaded byte-exact through it; three daemons; a wrong cluster secret;
// strangers at the peer port (no secret, a wrong one, a replayed handshake, data before proof) get
// nothing and the daemon serves on;
// a peer that stops answering (SIGSTOP) costs a lookup its budget and no more; a peer killed
// before the load fails the load cleanly and the daemon goes on serving.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <regex>
#include <thread>

#include "core/key_hasher.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/controller_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/sim_engine_process.h"
#include "tests/support/subprocess.h"
#include "tests/support/test_layout.h"

namespace strata {
namespace {

using std::chrono::milliseconds;
using test_support::DaemonProcess;
using test_support::RawEngineClient;

// 128 KiB per chunk: two 64 KiB pages.
KvLayout Layout() {
  return test_support::SmallLayout(
      {.model_id = "remote-itest", .num_layers = 4, .head_dim = 64, .chunk_tokens = 64});
}

std::vector<ChunkKey> Keys(size_t num_chunks, uint32_t first_token) {
  std::vector<uint32_t> tokens(num_chunks * 64);
  std::iota(tokens.begin(), tokens.end(), first_token);
  return KeyHasher::Create(Layout(), {})->PrefixKeys(tokens, {});
}

// A file holding `token`, for [remote] cluster_token_file.
std::string TokenFile(const std::string& name, const std::string& token) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) /
                                     fmt::format("strata-token-{}-{}", name, ::getpid());
  std::ofstream(path) << token << "\n";
  return path.string();
}

struct Peer {
  std::unique_ptr<DaemonProcess> process;
  std::string remote_address;  // where peers reach it
};

// A daemon with the remote tier on, dialling `peers`; `node_id` empty: the default; `more_toml`
// is appended to its config (e.g. a [disk] table).
Peer StartPeer(const std::string& token_file, const std::vector<std::string>& peers,
               uint32_t lookup_budget_us = 200'000, const std::string& node_id = "",
               const std::string& more_toml = "", const std::string& transports = "tcp") {
  std::string peer_list;
  for (const std::string& peer : peers) peer_list += fmt::format("\"{}\", ", peer);
  test_support::DaemonProcessOptions options{
      .host_capacity = "16MiB",
      .extra_toml = fmt::format(
          "[remote]\nlisten_address = \"127.0.0.1:0\"\ncluster_token_file = \"{}\"\n"
          "transports = \"{}\"\nnet_devices = \"lo\"\nlookup_budget_us = {}\npeers = [{}]\n{}{}",
          token_file, transports, lookup_budget_us, peer_list,
          node_id.empty() ? "" : fmt::format("node_id = \"{}\"\n", node_id), more_toml)};
  absl::StatusOr<std::unique_ptr<DaemonProcess>> process = DaemonProcess::Start(options);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return {};
  std::smatch match;
  const std::string log = (*process)->Log();
  const std::regex listening(R"(peers reach this node \([^)]*\) on ([0-9.]+:[0-9]+))");
  EXPECT_TRUE(std::regex_search(log, match, listening)) << log;
  return {std::move(*process), match.size() > 1 ? match[1].str() : ""};
}

uint32_t LookupHits(RawEngineClient& engine, const std::vector<ChunkKey>& keys) {
  absl::StatusOr<v1::EngineResponse> found = engine.Call(test_support::LookupRequest(keys));
  return found.ok() ? found->lookup().hit_chunks() : 0;
}

// Looks up until `expected` chunks are found (peers need a moment to admit each other).
uint32_t LookupUntil(RawEngineClient& engine, const std::vector<ChunkKey>& keys,
                     uint32_t expected) {
  uint32_t hits = 0;
  for (int attempt = 0; attempt < 200 && hits != expected; ++attempt) {
    hits = LookupHits(engine, keys);
    if (hits != expected) std::this_thread::sleep_for(milliseconds(25));
  }
  return hits;
}

// Loads `keys` and checks every 4 KiB of chunk i holds byte_of(i); returns the statuses.
std::vector<int> LoadAndCheck(RawEngineClient& engine, std::span<const ChunkKey> keys,
                              const std::function<uint8_t(uint32_t)>& byte_of) {
  absl::StatusOr<v1::EngineResponse> leased = engine.Call(test_support::PrepareLoadRequest(keys));
  EXPECT_TRUE(leased.ok()) << leased.status();
  std::vector<int> codes;
  if (!leased.ok()) return codes;
  for (uint32_t i = 0; i < keys.size(); ++i) {
    const v1::LoadPlacement& chunk = leased->prepare_load().chunks(static_cast<int>(i));
    codes.push_back(chunk.status().code());
    if (chunk.status().code() != 0) continue;
    for (const v1::Extent& extent : chunk.extents()) {
      for (uint64_t b = 0; b < extent.length(); b += 4096) {
        EXPECT_EQ(static_cast<uint8_t>(engine.arena()[extent.offset() + b]), byte_of(i))
            << "chunk " << i;
      }
    }
  }
  return codes;
}

// Whether `daemon` admits the peer `node` within 5 s: a lookup naming it as the source is
// answered (it is refused until then).
bool AwaitAdmitted(DaemonProcess& daemon, const std::string& node) {
  RawEngineClient probe(daemon.engine_socket());
  if (!probe.Handshake(Layout()).ok()) return false;
  for (int attempt = 0; attempt < 200; ++attempt) {
    v1::EngineRequest lookup = test_support::LookupRequest(Keys(1, 0));
    lookup.mutable_lookup()->set_source_node(node);
    absl::StatusOr<v1::EngineResponse> answer = probe.Call(std::move(lookup));
    if (answer.ok() && answer->status().code() == 0) return true;
    std::this_thread::sleep_for(milliseconds(25));
  }
  return false;
}

// A daemon dialling `dial` and an engine session on it that stored `keys` (chunk i holds byte
// fill + i).
struct Node {
  Peer peer;
  std::unique_ptr<RawEngineClient> engine;
  DaemonProcess& process() { return *peer.process; }
};

Node StartNode(const std::string& token_file, const std::vector<std::string>& dial,
               const std::vector<ChunkKey>& keys = {}, uint8_t fill = 0,
               uint32_t lookup_budget_us = 200'000) {
  Node node{StartPeer(token_file, dial, lookup_budget_us), nullptr};
  if (!node.peer.process) return node;
  node.engine = std::make_unique<RawEngineClient>(node.peer.process->engine_socket());
  EXPECT_TRUE(node.engine->Handshake(Layout()).ok());
  if (!keys.empty()) {
    EXPECT_TRUE(node.engine->Store(keys, 64, fill).ok());
  }
  return node;
}

// A daemon that learns its peers from the controller at `controller` only (no peer list),
// registered as `id`, with an engine session that stored `keys` (chunk i holds fill + i).
Node StartMember(const std::string& token_file, const std::string& controller,
                 const std::string& id, const std::vector<ChunkKey>& keys, uint8_t fill) {
  Node node{StartPeer(token_file, {}, 200'000, id,
                      fmt::format("[cluster]\ncontrollers = [\"{}\"]\ninstance_id = \"{}\"\n",
                                  controller, id)),
            nullptr};
  if (!node.peer.process) return node;
  node.engine = std::make_unique<RawEngineClient>(node.peer.process->engine_socket());
  EXPECT_TRUE(node.engine->Handshake(Layout()).ok());
  EXPECT_TRUE(node.engine->Store(keys, 64, fill).ok());
  return node;
}

// The addresses `daemon` dials, as `strata peers` lists them.
std::vector<std::string> DialledPeers(DaemonProcess& daemon) {
  grpc::ClientContext context;
  v1::ListPeersResponse peers;
  std::vector<std::string> addresses;
  if (!daemon.control().ListPeers(&context, v1::ListPeersRequest(), &peers).ok()) return addresses;
  for (const v1::Peer& peer : peers.peers()) {
    if (peer.outbound()) addresses.push_back(peer.address());
  }
  return addresses;
}

TEST(RemotePeers, MembersLearnTheirPeersFromTheControllerAsTheyJoinAndLeave) {
  auto controller = test_support::ControllerProcess::Start({.instance_timeout_ms = 1'500});
  ASSERT_TRUE(controller.ok()) << controller.status();
  const std::string token = TokenFile("members", "secret-members");
  const std::vector<ChunkKey> on_a = Keys(3, 0);
  const std::vector<ChunkKey> on_b = Keys(2, 100'000);
  const std::vector<ChunkKey> on_c = Keys(4, 200'000);
  Node a = StartMember(token, (*controller)->address(), "member-a", on_a, 20);
  ASSERT_TRUE(a.engine);
  Node b = StartMember(token, (*controller)->address(), "member-b", on_b, 40);
  ASSERT_TRUE(b.engine);
  ASSERT_EQ(LookupUntil(*a.engine, on_b, 2), 2u) << a.process().Log();
  ASSERT_EQ(LookupUntil(*b.engine, on_a, 3), 3u) << b.process().Log();

  // A third member, started later, serves the first two, and finds theirs.
  Node c = StartMember(token, (*controller)->address(), "member-c", on_c, 60);
  ASSERT_TRUE(c.engine);
  ASSERT_EQ(LookupUntil(*a.engine, on_c, 4), 4u) << a.process().Log();
  ASSERT_EQ(LookupUntil(*b.engine, on_c, 4), 4u) << b.process().Log();
  EXPECT_EQ(LoadAndCheck(*a.engine, on_c, [](uint32_t i) { return 60 + i; }),
            std::vector<int>(4, 0));
  ASSERT_EQ(LookupUntil(*c.engine, on_a, 3), 3u) << c.process().Log();
  ASSERT_EQ(LookupUntil(*c.engine, on_b, 2), 2u) << c.process().Log();
  EXPECT_EQ(LoadAndCheck(*c.engine, on_b, [](uint32_t i) { return 40 + i; }),
            std::vector<int>(2, 0));

  // Killed, it leaves the membership after the controller's timeout, and the others stop
  // dialling it; what they hold they serve on.
  const std::string c_address = c.peer.remote_address;
  auto dials_c = [&](DaemonProcess& daemon) {
    const std::vector<std::string> addresses = DialledPeers(daemon);
    return std::find(addresses.begin(), addresses.end(), c_address) != addresses.end();
  };
  // Of each pair of members, the one whose id sorts first dials the other (one link a pair, used
  // both ways): A and B dial C once their heartbeats bring the membership that names it, and C
  // dials no one. The kill comes as soon as they dial, often while the links are wiring up.
  for (int i = 0; i < 400 && !(dials_c(a.process()) && dials_c(b.process())); ++i) {
    std::this_thread::sleep_for(milliseconds(25));
  }
  ASSERT_TRUE(dials_c(a.process()));
  ASSERT_TRUE(dials_c(b.process()));
  EXPECT_TRUE(DialledPeers(c.process()).empty());
  c.engine.reset();
  c.process().Kill();
  for (int i = 0; i < 400 && (dials_c(a.process()) || dials_c(b.process())); ++i) {
    std::this_thread::sleep_for(milliseconds(25));
  }
  EXPECT_FALSE(dials_c(a.process())) << a.process().Log();
  EXPECT_FALSE(dials_c(b.process())) << b.process().Log();
  EXPECT_NE(a.process().Log().find(fmt::format("{} left the cluster", c_address)),
            std::string::npos);
  EXPECT_EQ(LookupHits(*b.engine, on_a), 3u) << b.process().Log();
  EXPECT_EQ(LoadAndCheck(*b.engine, on_a, [](uint32_t i) { return 20 + i; }),
            std::vector<int>(3, 0));
}

TEST(RemotePeers, AChunkStoredThroughAIsFoundAndLoadedByteExactThroughB) {
  const std::string token = TokenFile("ab", "secret-ab");
  const std::vector<ChunkKey> keys = Keys(8, 0);
  Node a = StartNode(token, {}, keys, 7);
  ASSERT_TRUE(a.engine);
  Node b = StartNode(token, {a.peer.remote_address});
  ASSERT_TRUE(b.engine);
  ASSERT_EQ(LookupUntil(*b.engine, keys, 8), 8u) << b.process().Log();
  EXPECT_EQ(LoadAndCheck(*b.engine, keys, [](uint32_t i) { return 7 + i; }),
            std::vector<int>(8, 0));
  // `strata peers`: B dialled A, A is up, and the bytes B read from it are counted.
  grpc::ClientContext context;
  v1::ListPeersResponse peers;
  ASSERT_TRUE(b.process().control().ListPeers(&context, v1::ListPeersRequest(), &peers).ok());
  EXPECT_TRUE(peers.remote_enabled());
  ASSERT_EQ(peers.peers_size(), 1);
  EXPECT_EQ(peers.peers(0).address(), a.peer.remote_address);
  EXPECT_TRUE(peers.peers(0).outbound());
  EXPECT_EQ(peers.peers(0).state(), v1::Peer::STATE_UP);
  EXPECT_EQ(peers.peers(0).bytes_read(), 8u * Layout().chunk_bytes(64));
  // B holds them itself now: found even with A gone.
  a.process().Stop();
  EXPECT_EQ(LookupHits(*b.engine, keys), 8u);
  EXPECT_EQ(b.process().Stop().code, 0);
}

TEST(RemotePeers, ThreeDaemonsFindEachOthersChunks) {
  const std::string token = TokenFile("abc", "secret-abc");
  const std::vector<ChunkKey> on_a = Keys(4, 0);
  const std::vector<ChunkKey> on_b = Keys(6, 100'000);
  Node a = StartNode(token, {}, on_a, 10);
  ASSERT_TRUE(a.engine);
  Node b = StartNode(token, {}, on_b, 50);
  ASSERT_TRUE(b.engine);
  Node c = StartNode(token, {a.peer.remote_address, b.peer.remote_address});
  ASSERT_TRUE(c.engine);
  ASSERT_EQ(LookupUntil(*c.engine, on_a, 4), 4u) << c.process().Log();
  ASSERT_EQ(LookupUntil(*c.engine, on_b, 6), 6u) << c.process().Log();
  EXPECT_EQ(LoadAndCheck(*c.engine, on_a, [](uint32_t i) { return 10 + i; }),
            std::vector<int>(4, 0));
  EXPECT_EQ(LoadAndCheck(*c.engine, on_b, [](uint32_t i) { return 50 + i; }),
            std::vector<int>(6, 0));
}

TEST(RemotePeers, APeerWithTheWrongTokenIsRefusedAndFindsNothing) {
  const std::vector<ChunkKey> keys = Keys(2, 0);
  Node a = StartNode(TokenFile("a", "right"), {}, keys, 1);
  ASSERT_TRUE(a.engine);
  Node b = StartNode(TokenFile("b", "wrong"), {a.peer.remote_address});
  ASSERT_TRUE(b.engine);
  bool refused = false;
  for (int attempt = 0; attempt < 200 && !refused; ++attempt) {
    refused = a.process().Log().find("does not hold this cluster's secret") != std::string::npos;
    if (!refused) std::this_thread::sleep_for(milliseconds(25));
  }
  EXPECT_TRUE(refused) << a.process().Log();
  EXPECT_EQ(LookupHits(*b.engine, keys), 0u);
}

TEST(RemotePeers, StrangersAtThePeerPortGetNothingAndTheDaemonServesOn) {
  const std::string secret = "secret-strangers";
  const std::string token = TokenFile("strangers", secret);
  const std::vector<ChunkKey> keys = Keys(2, 0);
  Node a = StartNode(token, {}, keys, 9);
  ASSERT_TRUE(a.engine);
  for (const char* scenario : {"no-auth", "wrong-secret", "replay", "data-first"}) {
    // The replay is recorded from a genuine handshake, made with the cluster's secret.
    std::vector<std::string> argv = {STRATA_HOSTILE_PEER_PATH, a.peer.remote_address, scenario};
    if (std::string_view(scenario) == "replay") argv.insert(argv.end(), {"--secret", secret});
    test_support::Subprocess stranger(argv);
    ASSERT_EQ(stranger.Wait(std::chrono::seconds(30)), 0) << scenario << stranger.Stderr();
    const std::string report = stranger.Stdout();
    SCOPED_TRACE(report);
    // Authentication messages only: no region, no bytes, no answer to a call.
    EXPECT_NE(report.find("\"hello\": 0,"), std::string::npos);
    EXPECT_NE(report.find("\"call_reply\": 0,"), std::string::npos);
    EXPECT_NE(report.find("\"read_data\": 0,"), std::string::npos);
    // The replay's recording is a whole genuine handshake (challenge and proof).
    if (std::string_view(scenario) == "replay") {
      EXPECT_NE(report.find("\"recorded\": 2}"), std::string::npos);
    }
    // A stranger that proved wrongly is told so before the link closes.
    const bool proved =
        std::string_view(scenario) == "wrong-secret" || std::string_view(scenario) == "replay";
    EXPECT_NE(report.find(proved ? "\"refusals\": 1," : "\"refusals\": 0,"), std::string::npos);
  }
  // The daemon saw each stranger: two sent data before authenticating, two proved wrongly.
  const std::string log = a.process().Log();
  auto count = [&](std::string_view what) {
    size_t n = 0;
    for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("before authenticating"), 2u) << log;
  EXPECT_EQ(count("does not hold this cluster's secret"), 2u) << log;
  // The daemon serves on: a peer with the secret finds and loads its chunks.
  Node b = StartNode(token, {a.peer.remote_address});
  ASSERT_TRUE(b.engine);
  ASSERT_EQ(LookupUntil(*b.engine, keys, 2), 2u) << b.process().Log();
  EXPECT_EQ(LoadAndCheck(*b.engine, keys, [](uint32_t i) { return 9 + i; }),
            std::vector<int>(2, 0));
}

TEST(RemotePeers, ASlowPeerThatProvedWronglyStillHearsTheRefusal) {
  // The daemon keeps a refused link open until the peer closes it: a peer that is slow to read
  // (here it reads nothing for 300 ms after its proof) learns that it was refused, on either
  // transport, instead of seeing the link reset first.
  const std::string token = TokenFile("slow", "secret-slow");
  for (const char* transports : {"tcp", "posix,cma,tcp"}) {
    SCOPED_TRACE(transports);
    Peer a = StartPeer(token, {}, 200'000, "", "", transports);
    ASSERT_TRUE(a.process);
    for (int attempt = 0; attempt < 3; ++attempt) {
      test_support::Subprocess stranger({STRATA_HOSTILE_PEER_PATH, a.remote_address, "wrong-secret",
                                         "--stall-ms", "300", "--listen-ms", "300", "--transports",
                                         transports});
      ASSERT_EQ(stranger.Wait(std::chrono::seconds(30)), 0) << stranger.Stderr();
      const std::string report = stranger.Stdout();
      EXPECT_NE(report.find("\"refusals\": 1,"), std::string::npos) << report;
      EXPECT_NE(report.find("\"hello\": 0,"), std::string::npos) << report;
    }
  }
}

TEST(RemotePeers, APeerThatStopsAnsweringCostsALookupItsBudgetOnly) {
  const std::string token = TokenFile("stop", "secret-stop");
  const std::vector<ChunkKey> keys = Keys(4, 0);
  Node a = StartNode(token, {}, keys, 3);
  ASSERT_TRUE(a.engine);
  Node b = StartNode(token, {a.peer.remote_address}, {}, 0, /*lookup_budget_us=*/20'000);
  ASSERT_TRUE(b.engine);
  ASSERT_EQ(LookupUntil(*b.engine, keys, 4), 4u) << b.process().Log();

  // A frozen peer: its sockets stay open, nothing answers.
  ASSERT_EQ(::kill(a.process().pid(), SIGSTOP), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(LookupHits(*b.engine, Keys(4, 500'000)), 0u);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, milliseconds(500))
      << "a 20 ms budget took " << std::chrono::duration_cast<milliseconds>(took).count() << " ms";
  ::kill(a.process().pid(), SIGCONT);
}

TEST(RemotePeers, APeerKilledBeforeTheLoadFailsItCleanly) {
  const std::string token = TokenFile("kill", "secret-kill");
  const std::vector<ChunkKey> keys = Keys(4, 0);
  Node a = StartNode(token, {}, keys, 3);
  ASSERT_TRUE(a.engine);
  Node b = StartNode(token, {a.peer.remote_address});
  ASSERT_TRUE(b.engine);
  ASSERT_EQ(LookupUntil(*b.engine, keys, 4), 4u) << b.process().Log();
  a.process().Kill();
  const std::vector<int> codes = LoadAndCheck(*b.engine, keys, [](uint32_t i) { return 3 + i; });
  ASSERT_EQ(codes.size(), 4u);
  EXPECT_NE(codes[0], 0);  // nothing served, nothing wrong: the engine recomputes
  // B goes on serving: its own chunks store and load.
  const std::vector<ChunkKey> own = Keys(2, 900'000);
  ASSERT_TRUE(b.engine->Store(own, 64, 60).ok());
  EXPECT_EQ(LoadAndCheck(*b.engine, own, [](uint32_t i) { return 60 + i; }),
            std::vector<int>(2, 0));
  EXPECT_EQ(b.process().Stop().code, 0);
}

TEST(RemotePeers, APeerKilledWhileItsBytesAreAskedForFailsThoseChunksAlone) {
  const std::string token = TokenFile("midway", "secret-midway");
  const std::vector<ChunkKey> keys = Keys(32, 0);
  Node a = StartNode(token, {}, keys, 5);
  ASSERT_TRUE(a.engine);
  Node b = StartNode(token, {a.peer.remote_address});
  ASSERT_TRUE(b.engine);
  const std::vector<ChunkKey> own = Keys(2, 900'000);
  ASSERT_TRUE(b.engine->Store(own, 64, 70).ok());
  ASSERT_EQ(LookupUntil(*b.engine, keys, 32), 32u) << b.process().Log();
  absl::StatusOr<v1::TierStats> before = b.process().HostStats();
  ASSERT_TRUE(before.ok()) << before.status();

  // A stops with B's load under way: B has leased the chunks on A, reserved its pages and asked
  // for the bytes, which do not come. Then A dies.
  ASSERT_EQ(::kill(a.process().pid(), SIGSTOP), 0);
  std::vector<int> codes;
  std::thread load(
      [&] { codes = LoadAndCheck(*b.engine, keys, [](uint32_t i) { return 5 + i; }); });
  std::this_thread::sleep_for(milliseconds(300));
  a.process().Kill();
  load.join();
  ASSERT_EQ(codes.size(), keys.size());
  // Nothing A did not send is served (LoadAndCheck checked the bytes of any chunk served).
  EXPECT_NE(std::count_if(codes.begin(), codes.end(), [](int code) { return code != 0; }), 0)
      << b.process().Log();
  // What B reserved for the chunks is given back, and B serves on: its own chunks load, and its
  // lookups no longer count on A's.
  absl::StatusOr<v1::TierStats> after;
  for (int attempt = 0; attempt < 200; ++attempt) {
    after = b.process().HostStats();
    ASSERT_TRUE(after.ok()) << after.status();
    if (after->reserved_bytes() == before->reserved_bytes() && after->leases() == 0) break;
    std::this_thread::sleep_for(milliseconds(25));
  }
  EXPECT_EQ(after->reserved_bytes(), before->reserved_bytes());
  EXPECT_EQ(after->leases(), 0u);
  EXPECT_EQ(LoadAndCheck(*b.engine, own, [](uint32_t i) { return 70 + i; }),
            std::vector<int>(2, 0));
  EXPECT_EQ(LookupHits(*b.engine, keys), 0u);
  EXPECT_EQ(b.process().Stop().code, 0);
}

TEST(RemotePeers, APrefetchBringsAPeersChunksBeforeTheLoad) {
  const std::string token = TokenFile("prefetch", "secret-prefetch");
  const std::vector<ChunkKey> keys = Keys(4, 300'000);
  Node a = StartNode(token, {}, keys, 90);
  ASSERT_TRUE(a.engine);
  Node b = StartNode(token, {a.peer.remote_address});
  ASSERT_TRUE(b.engine);
  // Once A is admitted, B's Prefetch has the chunks promoted in the background.
  uint64_t in_host = 0;
  for (int attempt = 0; attempt < 200 && in_host < keys.size(); ++attempt) {
    ASSERT_TRUE(b.engine->Call(test_support::PrefetchRequest(keys)).ok());
    std::this_thread::sleep_for(milliseconds(25));
    absl::StatusOr<v1::TierStats> host = b.process().HostStats();
    ASSERT_TRUE(host.ok()) << host.status();
    in_host = host->chunks();
  }
  ASSERT_EQ(in_host, keys.size()) << b.process().Log();
  // The load finds them in B's host tier: nothing is fetched again.
  EXPECT_EQ(LoadAndCheck(*b.engine, keys, [](uint32_t i) { return 90 + i; }),
            std::vector<int>(4, 0));
}

TEST(RemotePeers, AnOperatorCopiesChunksIntoAPeersHostTier) {
  const std::string token = TokenFile("push", "secret-push");
  // B dials nobody: whatever its engine finds, its own host tier holds.
  Node b = StartNode(token, {});
  ASSERT_TRUE(b.engine);
  std::vector<uint32_t> tokens(4 * 64);
  std::iota(tokens.begin(), tokens.end(), 7000);
  const std::vector<ChunkKey> keys = KeyHasher::Create(Layout(), {})->PrefixKeys(tokens, {});
  Node a = StartNode(token, {b.peer.remote_address}, keys, 40);
  ASSERT_TRUE(a.engine);
  v1::ListPeersResponse peers_of_a;
  for (int attempt = 0; attempt < 200; ++attempt) {
    grpc::ClientContext context;
    peers_of_a.Clear();
    ASSERT_TRUE(a.process().control().ListPeers(&context, {}, &peers_of_a).ok());
    if (peers_of_a.peers_size() == 1 && peers_of_a.peers(0).state() == v1::Peer::STATE_UP) break;
    std::this_thread::sleep_for(milliseconds(25));
  }
  ASSERT_EQ(peers_of_a.peers_size(), 1);
  const std::string b_node = peers_of_a.peers(0).node_id();

  v1::MoveRequest move;
  *move.mutable_selector()->mutable_layout() = ToProto(Layout());
  move.mutable_selector()->mutable_tokens()->Add(tokens.begin(), tokens.end());
  move.set_target(v1::TIER_HOST);
  move.set_target_instance(b_node);
  {
    grpc::ClientContext context;
    v1::MoveResponse moved;
    const grpc::Status status = a.process().control().Move(&context, move, &moved);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(moved.moved_chunks(), 4u);
    EXPECT_EQ(moved.missing_chunks(), 0u);
  }
  EXPECT_EQ(LookupHits(*b.engine, keys), 4u);
  EXPECT_EQ(LoadAndCheck(*b.engine, keys, [](uint32_t i) { return 40 + i; }),
            std::vector<int>(4, 0));
  {  // Again: B holds them all already.
    grpc::ClientContext context;
    v1::MoveResponse moved;
    ASSERT_TRUE(a.process().control().Move(&context, move, &moved).ok());
    EXPECT_EQ(moved.moved_chunks(), 0u);
    EXPECT_EQ(moved.already_in_target(), 4u);
  }
  {  // A peer nobody knows.
    grpc::ClientContext context;
    v1::MoveResponse moved;
    move.set_target_instance("nobody:1");
    EXPECT_EQ(a.process().control().Move(&context, move, &moved).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
}

// A's chunks went to its disk (an operator's move): B still finds them on A and loads them
// byte-exact; A promotes them for B's lease first.
TEST(RemotePeers, ChunksAPeerHoldsOnlyOnDiskAreServed) {
  const std::string token = TokenFile("disk", "secret-disk");
  const std::filesystem::path disk =
      std::filesystem::path(::testing::TempDir()) / fmt::format("strata-peer-disk-{}", ::getpid());
  Node a{StartPeer(token, {}, 200'000, "",
                   fmt::format("[disk]\ndirectory = \"{}\"\ncapacity_bytes = \"16MiB\"\n"
                               "segment_bytes = \"1MiB\"\n",
                               disk.string())),
         nullptr};
  ASSERT_TRUE(a.peer.process);
  a.engine = std::make_unique<RawEngineClient>(a.process().engine_socket());
  ASSERT_TRUE(a.engine->Handshake(Layout()).ok());
  const std::vector<ChunkKey> keys = Keys(4, 3000);
  ASSERT_TRUE(a.engine->Store(keys, 64, 90).ok());
  v1::MoveRequest move;
  *move.mutable_selector()->mutable_layout() = ToProto(Layout());
  for (uint32_t token = 3000; token < 3000 + 4 * 64; ++token) {
    move.mutable_selector()->add_tokens(token);
  }
  move.set_target(v1::TIER_DISK);
  {
    grpc::ClientContext context;
    v1::MoveResponse moved;
    const grpc::Status status = a.process().control().Move(&context, move, &moved);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(moved.moved_chunks(), 4u);
  }
  Node b = StartNode(token, {a.peer.remote_address});
  ASSERT_TRUE(b.engine);
  ASSERT_EQ(LookupUntil(*b.engine, keys, 4), 4u) << b.process().Log();
  EXPECT_EQ(LoadAndCheck(*b.engine, keys, [](uint32_t i) { return 90 + i; }),
            std::vector<int>(4, 0));
  EXPECT_EQ(b.process().Stop().code, 0);
  EXPECT_EQ(a.process().Stop().code, 0);
  std::filesystem::remove_all(disk);
}

// Disaggregated prefill through two stratad and two sim_engines, on the path the vLLM adapter
// drives: the prefiller on A (kv_transfer send) stores the whole prompt, partial last chunk
// included, and names A's node; the decoder on B (kv_transfer receive from that node) loads every
// prompt token but the last asynchronously, fetched by B's daemon from A, byte-exact. A decoder
// naming a node B has not admitted recomputes, with the reason in its log; so does one whose
// prefiller's daemon died.
TEST(RemotePeers, PrefillOnOneNodeDecodeOnAnother) {
  const std::string token = TokenFile("pd", "secret-pd");
  Peer a = StartPeer(token, {}, 200'000, "prefill-a");
  ASSERT_TRUE(a.process);
  Peer b = StartPeer(token, {a.remote_address}, 200'000, "decode-b");
  ASSERT_TRUE(b.process);
  // B admits A within a moment: until then a lookup naming A is refused.
  ASSERT_TRUE(AwaitAdmitted(*b.process, "prefill-a")) << b.process->Log();

  const std::vector<std::string> prefill = test_support::RunSimEngine(
      a.process->engine_socket(), {"--prompt", "40:1000", "--kv-transfer", "send"});
  ASSERT_EQ(prefill.size(), 1u);
  EXPECT_EQ(test_support::JsonString(prefill[0], "daemon_node"), "prefill-a") << prefill[0];
  EXPECT_EQ(test_support::JsonInt(prefill[0], "matched_tokens"), 0);

  const std::vector<std::string> decode = test_support::RunSimEngine(
      b.process->engine_socket(),
      {"--prompt", "40:1000", "--kv-transfer", "receive", "--source-node", "prefill-a"});
  ASSERT_EQ(decode.size(), 1u);
  EXPECT_NE(decode[0].find("\"load_async\":true"), std::string::npos) << decode[0];
  EXPECT_EQ(test_support::JsonInt(decode[0], "matched_tokens"), 999) << decode[0];
  EXPECT_EQ(test_support::JsonInt(decode[0], "failed_blocks"), 0) << decode[0];
  EXPECT_EQ(test_support::JsonInt(decode[0], "wrong_values"), 0) << decode[0];

  std::unique_ptr<test_support::Subprocess> stranger = test_support::StartSimEngine(
      b.process->engine_socket(),
      {"--prompt", "40:1000", "--kv-transfer", "receive", "--source-node", "nobody"});
  ASSERT_EQ(stranger->Wait(milliseconds(60'000)), 0) << stranger->Stderr();
  const std::vector<std::string> lines = test_support::SimEngineJsonLines(*stranger);
  ASSERT_GE(lines.size(), 1u);
  EXPECT_EQ(test_support::JsonInt(lines[0], "matched_tokens"), 0) << lines[0];
  EXPECT_EQ(test_support::JsonInt(lines[0], "wrong_values"), 0) << lines[0];
  EXPECT_NE(stranger->Stderr().find("'nobody', which is not an admitted peer"), std::string::npos)
      << stranger->Stderr();

  // The prefiller's daemon dies after a prefill: the decoder recomputes, and serves nothing wrong.
  const std::vector<std::string> second = test_support::RunSimEngine(
      a.process->engine_socket(), {"--prompt", "41:1000", "--kv-transfer", "send"});
  ASSERT_EQ(second.size(), 1u);
  a.process->Kill();
  const std::vector<std::string> orphan = test_support::RunSimEngine(
      b.process->engine_socket(),
      {"--prompt", "41:1000", "--kv-transfer", "receive", "--source-node", "prefill-a"});
  ASSERT_EQ(orphan.size(), 1u);
  EXPECT_EQ(test_support::JsonInt(orphan[0], "wrong_values"), 0) << orphan[0];
  EXPECT_EQ(test_support::JsonInt(orphan[0], "bytes_loaded"), 0)
      << "nothing can come from a dead node: the prompt is recomputed " << orphan[0];
}

// With the decoder's node in the prefill's params, A streams each layer to B as the prefill saves
// it: the chunks are in B's host tier when the decode starts, and its load is a plain host hit.
TEST(RemotePeers, APrefillStreamsItsKvToTheDecodersDaemonAsItComputes) {
  const std::string token = TokenFile("pd-stream", "secret-pd-stream");
  Peer a = StartPeer(token, {}, 200'000, "prefill-a");
  ASSERT_TRUE(a.process);
  Peer b = StartPeer(token, {a.remote_address}, 200'000, "decode-b");
  ASSERT_TRUE(b.process);
  // A admits B (B dialled it) and B admits A within a moment: until then A cannot stream to B.
  ASSERT_TRUE(AwaitAdmitted(*a.process, "decode-b")) << a.process->Log();
  ASSERT_TRUE(AwaitAdmitted(*b.process, "prefill-a")) << b.process->Log();

  const std::vector<std::string> prefill = test_support::RunSimEngine(
      a.process->engine_socket(),
      {"--prompt", "42:1000", "--kv-transfer", "send", "--decode-node", "decode-b"});
  ASSERT_EQ(prefill.size(), 1u);
  EXPECT_EQ(test_support::JsonInt(prefill[0], "matched_tokens"), 0);
  // B holds the prompt's chunks (every chunk A stored) before any decoder asked for them: they
  // were streamed. The last layers may still be on their way when the prefill returns.
  ASSERT_GT(test_support::JsonInt(prefill[0], "bytes_saved"), 0) << prefill[0];
  auto host_chunks = [](test_support::DaemonProcess& daemon) -> uint64_t {
    absl::StatusOr<v1::TierStats> host = daemon.HostStats();
    return host.ok() ? host->chunks() : 0;
  };
  const uint64_t stored = host_chunks(*a.process);
  ASSERT_GT(stored, 0u) << a.process->Log();
  uint64_t held = 0;
  for (int attempt = 0; attempt < 400 && held < stored; ++attempt) {
    held = host_chunks(*b.process);
    if (held < stored) std::this_thread::sleep_for(milliseconds(25));
  }
  EXPECT_EQ(held, stored) << a.process->Log() << b.process->Log();

  const std::vector<std::string> decode = test_support::RunSimEngine(
      b.process->engine_socket(),
      {"--prompt", "42:1000", "--kv-transfer", "receive", "--source-node", "prefill-a"});
  ASSERT_EQ(decode.size(), 1u);
  EXPECT_EQ(test_support::JsonInt(decode[0], "matched_tokens"), 999) << decode[0];
  EXPECT_EQ(test_support::JsonInt(decode[0], "failed_blocks"), 0) << decode[0];
  EXPECT_EQ(test_support::JsonInt(decode[0], "wrong_values"), 0) << decode[0];

  // A decoder that is not a peer of A: the prefill streams nothing and still completes.
  const std::vector<std::string> lonely = test_support::RunSimEngine(
      a.process->engine_socket(),
      {"--prompt", "43:1000", "--kv-transfer", "send", "--decode-node", "nobody"});
  ASSERT_EQ(lonely.size(), 1u);
  EXPECT_EQ(test_support::JsonInt(lonely[0], "wrong_values"), 0) << lonely[0];
  EXPECT_NE(a.process->Log().find("layer stream to nobody"), std::string::npos) << a.process->Log();
}

}  // namespace
}  // namespace strata
