// strata-controller with real stratad processes that register with it ([cluster] controllers):
// the cluster API answers from their chunks; a killed daemon leaves after the instance timeout; a
// stopped one leaves at once (it deregisters); a restarted controller is re-joined by every daemon
// and rebuilds its index from their snapshots; a controller that requires a token admits only the
// daemons and callers that present it; node calls forwarded to one daemon or fanned out to all;
// the CLI's cluster commands (--controller).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "core/key_hasher.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/cli_process.h"
#include "tests/support/cluster_client.h"
#include "tests/support/controller_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/test_layout.h"

namespace strata {
namespace {

using namespace std::chrono_literals;
using test_support::ClusterClient;
using test_support::ControllerProcess;
using test_support::DaemonProcess;
using test_support::Eventually;
using test_support::RawEngineClient;

KvLayout ClusterLayout() {
  return test_support::SmallLayout(
      {.model_id = "cluster-model", .head_dim = 64, .chunk_tokens = 64});
}

std::vector<uint32_t> ChainTokens(size_t chunks) {
  std::vector<uint32_t> tokens(chunks * 64);
  std::iota(tokens.begin(), tokens.end(), 2000);
  return tokens;
}

std::vector<ChunkKey> Chain(size_t chunks) {
  return KeyHasher::Create(ClusterLayout(), {})->PrefixKeys(ChainTokens(chunks), {});
}

// A daemon registered with `controllers` as `id`, and an engine session to store through.
struct Node {
  std::unique_ptr<DaemonProcess> daemon;
  std::unique_ptr<RawEngineClient> engine;
};

Node StartNode(const std::string& id, const std::string& controller,
               const std::string& extra_cluster_toml = "") {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
      {.extra_toml = fmt::format("[cluster]\ncontrollers = [\"{}\"]\ninstance_id = \"{}\"\n{}",
                                 controller, id, extra_cluster_toml)});
  EXPECT_TRUE(daemon.ok()) << daemon.status();
  if (!daemon.ok()) return {};
  Node node{.daemon = *std::move(daemon)};
  node.engine = std::make_unique<RawEngineClient>(node.daemon->engine_socket());
  EXPECT_TRUE(node.engine->Handshake(ClusterLayout()).ok());
  return node;
}

TEST(ControllerClusterTest, DaemonsJoinAndTheClusterAnswersFromTheirChunks) {
  auto controller = ControllerProcess::Start({.instance_timeout_ms = 1'500});
  ASSERT_TRUE(controller.ok()) << controller.status();
  ClusterClient cluster((*controller)->address());
  const std::vector<ChunkKey> chain = Chain(6);

  Node a = StartNode("node-a", (*controller)->address());
  ASSERT_NE(a.daemon, nullptr);
  // Held before the controller knew b: its snapshot tells it.
  Node b = StartNode("node-b", (*controller)->address());
  ASSERT_NE(b.daemon, nullptr);
  ASSERT_TRUE(b.engine->Store({chain.begin(), chain.begin() + 2}, 64, 1).ok());
  ASSERT_TRUE(Eventually([&] { return cluster.Following() == "node-a node-b"; }))
      << cluster.Following() << "\n"
      << (*controller)->Log();
  // Stored after: the events.
  ASSERT_TRUE(a.engine->Store(chain, 64, 2).ok());
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(chain) == "node-a:6 node-b:2"; }))
      << cluster.HeldPrefixes(chain);

  v1::ListInstancesResponse listed;
  ASSERT_TRUE(cluster.ListInstances(listed).ok());
  ASSERT_EQ(listed.instances_size(), 2);
  const v1::InstanceInfo& info = listed.instances(0);
  EXPECT_EQ(info.control_endpoint(), a.daemon->control_target());
  EXPECT_EQ(info.engine_endpoint(), a.daemon->engine_socket());
  EXPECT_NE(info.lease_id(), 0u);
  EXPECT_LT(info.ms_since_heartbeat(), 1'500u);

  // Killed: no deregistration, no heartbeat; it leaves after the instance timeout.
  a.engine.reset();
  a.daemon->Kill();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(chain) == "node-b:2"; }))
      << cluster.HeldPrefixes(chain);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 5s);
  EXPECT_EQ(cluster.Following(), "node-b");

  // Stopped: it deregisters on its way out, well before the timeout would drop it.
  b.engine.reset();
  const auto stopping = std::chrono::steady_clock::now();
  EXPECT_EQ(b.daemon->Stop().code, 0);
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(chain).empty(); }));
  v1::ListInstancesResponse none;
  ASSERT_TRUE(cluster.ListInstances(none).ok());
  EXPECT_EQ(none.instances_size(), 0);
  EXPECT_NE((*controller)->Log().find("instance 'node-b' deregistered"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - stopping, 10s);
}

// The controller restarts on its address: the daemons' heartbeats are refused (NOT_FOUND), they
// register again, and the new controller's index is rebuilt from their snapshots.
TEST(ControllerClusterTest, TwoDaemonsThatClaimOneIdAreRefusedNotSwapped) {
  auto controller = ControllerProcess::Start({.instance_timeout_ms = 1'500});
  ASSERT_TRUE(controller.ok()) << controller.status();
  ClusterClient cluster((*controller)->address());
  Node first = StartNode("node-x", (*controller)->address());
  ASSERT_NE(first.daemon, nullptr);
  ASSERT_TRUE(Eventually([&] { return cluster.Following() == "node-x"; }));
  Node second = StartNode("node-x", (*controller)->address());
  ASSERT_NE(second.daemon, nullptr);
  // The second is told why, and the first keeps its registration, over several heartbeats.
  ASSERT_TRUE(Eventually([&] {
    return second.daemon->Log().find("instance id 'node-x' is held by the daemon at control " +
                                     first.daemon->control_target()) != std::string::npos;
  })) << second.daemon->Log();
  std::this_thread::sleep_for(1s);
  v1::ListInstancesResponse listed;
  ASSERT_TRUE(cluster.ListInstances(listed).ok());
  ASSERT_EQ(listed.instances_size(), 1);
  EXPECT_EQ(listed.instances(0).control_endpoint(), first.daemon->control_target());
  // Once the first is gone (killed: it never deregisters), the id is the second's.
  first.engine.reset();
  first.daemon->Kill();
  ASSERT_TRUE(Eventually([&] {
    v1::ListInstancesResponse now;
    return cluster.ListInstances(now).ok() && now.instances_size() == 1 &&
           now.instances(0).control_endpoint() == second.daemon->control_target();
  })) << (*controller)->Log();
}

TEST(ControllerClusterTest, ARestartedControllerIsRejoinedAndRebuildsItsIndex) {
  auto first = ControllerProcess::Start({.instance_timeout_ms = 1'000});
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string address = (*first)->address();
  const std::vector<ChunkKey> chain = Chain(4);
  Node a = StartNode("node-a", address);
  ASSERT_NE(a.daemon, nullptr);
  ASSERT_TRUE(a.engine->Store(chain, 64, 1).ok());
  ClusterClient cluster(address);
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(chain) == "node-a:4"; }));

  (*first)->Kill();
  // Before the start: the controller counts its timeout from its own start, later than this.
  const auto restarted = std::chrono::steady_clock::now();
  auto second = ControllerProcess::Start({.listen_address = address, .instance_timeout_ms = 1'000});
  ASSERT_TRUE(second.ok()) << second.status();
  // It answers at once, with what it has, and says that is not everything: it cannot know yet
  // which daemons its predecessor knew.
  bool complete = true;
  const std::string first_answer = cluster.HeldPrefixes(chain, &complete);
  EXPECT_FALSE(complete) << first_answer;
  v1::ClusterStatsResponse stats;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(
        v1::StrataCluster::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))
            ->Stats(&context, {}, &stats)
            .ok());
  }
  EXPECT_FALSE(stats.complete());
  EXPECT_NE(stats.incomplete_reason().find("re-register within the instance timeout"),
            std::string::npos)
      << stats.incomplete_reason();
  // Complete once the daemon has registered again, been read, and the timeout has passed.
  ASSERT_TRUE(Eventually([&] {
    return cluster.HeldPrefixes(chain, &complete) == "node-a:4" && complete;
  })) << cluster.HeldPrefixes(chain)
      << "\n"
      << (*second)->Log() << "\n"
      << a.daemon->Log();
  EXPECT_GE(std::chrono::steady_clock::now() - restarted, 1s);
  EXPECT_NE(a.daemon->Log().find("registering again"), std::string::npos);
}

TEST(ControllerClusterTest, ATokenGuardsTheClusterApiAndRegistration) {
  char dir[] = "/tmp/strata-cluster-auth-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string token_file = std::string(dir) + "/token";
  std::ofstream(token_file) << "cluster-secret\n";
  auto controller = ControllerProcess::Start({.auth_token_file = token_file});
  ASSERT_TRUE(controller.ok()) << controller.status();
  ClusterClient anonymous((*controller)->address());
  ClusterClient wrong((*controller)->address(), "not-the-secret");
  ClusterClient authorized((*controller)->address(), "cluster-secret");
  v1::ListInstancesResponse listed;
  EXPECT_EQ(anonymous.ListInstances(listed).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(wrong.ListInstances(listed).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(anonymous.HeldPrefixes(Chain(1)).rfind("error", 0), 0u);

  Node outsider = StartNode("outsider", (*controller)->address());
  Node member = StartNode("member", (*controller)->address(),
                          fmt::format("token_file = \"{}\"\n", token_file));
  ASSERT_NE(member.daemon, nullptr);
  ASSERT_TRUE(Eventually([&] { return authorized.Following() == "member"; }))
      << authorized.Following();
  std::this_thread::sleep_for(500ms);  // the outsider has tried, and kept trying
  EXPECT_EQ(authorized.Following(), "member");
  std::filesystem::remove_all(dir);
}

// "id:code" for each result, joined by spaces.
std::string Codes(const v1::NodeCallResponse& response) {
  std::string codes;
  for (const v1::NodeResult& result : response.results()) {
    codes += fmt::format("{}{}:{}", codes.empty() ? "" : " ", result.instance_id(), result.code());
  }
  return codes;
}

TEST(ControllerClusterTest, NodeCallsGoToOneInstanceOrToAll) {
  auto controller = ControllerProcess::Start({.instance_timeout_ms = 10'000});
  ASSERT_TRUE(controller.ok()) << controller.status();
  ClusterClient cluster((*controller)->address());
  const std::vector<ChunkKey> chain = Chain(3);
  Node a = StartNode("node-a", (*controller)->address());
  Node b = StartNode("node-b", (*controller)->address());
  ASSERT_NE(a.daemon, nullptr);
  ASSERT_NE(b.daemon, nullptr);
  ASSERT_TRUE(a.engine->Store(chain, 64, 1).ok());
  ASSERT_TRUE(b.engine->Store({chain[0]}, 64, 1).ok());
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(chain) == "node-a:3 node-b:1"; }));

  v1::NodeCall stats;
  stats.mutable_stats();
  v1::NodeCallResponse answered;
  ASSERT_TRUE(cluster.Forward(stats, answered).ok());
  ASSERT_EQ(Codes(answered), "node-a:0 node-b:0");
  EXPECT_EQ(answered.results(0).stats().tiers(0).chunks(), 3u);
  EXPECT_EQ(answered.results(1).stats().tiers(0).chunks(), 1u);
  // The cluster's Stats: both daemons' summed, beside the index.
  v1::ClusterStatsResponse totals;
  ASSERT_TRUE(cluster.Stats(totals).ok());
  EXPECT_EQ(totals.instances(), 2u);
  EXPECT_EQ(totals.following(), 2u);
  EXPECT_EQ(totals.answered(), 2u);
  EXPECT_EQ(totals.totals().tiers(0).tier(), v1::TIER_HOST);
  EXPECT_EQ(totals.totals().tiers(0).chunks(), 4u);
  EXPECT_EQ(totals.totals().tiers(0).payload_bytes(),
            answered.results(0).stats().tiers(0).payload_bytes() +
                answered.results(1).stats().tiers(0).payload_bytes());
  EXPECT_EQ(totals.totals().sessions(), 2u);
  EXPECT_EQ(totals.index().live_entries(), 4u);
  EXPECT_EQ(totals.index().chunks(), 3u);

  v1::NodeCall pin;
  pin.mutable_pin()->set_kind(v1::PIN_KIND_HARD);
  for (const ChunkKey& key : chain)
    *pin.mutable_pin()->mutable_selector()->add_keys() = ToProto(key);
  v1::NodeCallResponse pinned;
  ASSERT_TRUE(cluster.Forward(pin, pinned).ok());
  ASSERT_EQ(Codes(pinned), "node-a:0 node-b:0") << pinned.ShortDebugString();
  EXPECT_EQ(pinned.results(0).pin().pinned_chunks(), 3u);
  EXPECT_EQ(pinned.results(1).pin().pinned_chunks(), 1u);
  EXPECT_EQ(pinned.results(1).pin().missing_chunks(), 2u);

  // To one instance: b is cleared, and the index follows.
  v1::NodeCall clear;
  clear.set_instance_id("node-b");
  clear.mutable_clear()->set_all(true);
  v1::NodeCallResponse cleared;
  ASSERT_TRUE(cluster.Forward(clear, cleared).ok());
  ASSERT_EQ(Codes(cleared), "node-b:0");
  EXPECT_EQ(cleared.results(0).clear().removed_chunks(), 1u);
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(chain) == "node-a:3"; }));

  // A bad request to a daemon is that daemon's error; the controller's own refusals are the
  // call's.
  v1::NodeCall bad_pin;
  bad_pin.mutable_pin();
  v1::NodeCallResponse refused;
  ASSERT_TRUE(cluster.Forward(bad_pin, refused).ok());
  EXPECT_EQ(Codes(refused), "node-a:3 node-b:3") << "INVALID_ARGUMENT from each daemon";
  EXPECT_FALSE(refused.results(0).has_pin());
  v1::NodeCall unknown = stats;
  unknown.set_instance_id("node-z");
  EXPECT_EQ(cluster.Forward(unknown, refused).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(cluster.Forward(v1::NodeCall(), refused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // A daemon that died but is not yet dropped answers UNAVAILABLE; the others still answer.
  a.engine.reset();
  a.daemon->Kill();
  v1::NodeCallResponse partial;
  ASSERT_TRUE(cluster.Forward(stats, partial).ok());
  EXPECT_EQ(Codes(partial), "node-a:14 node-b:0");
  EXPECT_FALSE(partial.results(0).has_stats());
  v1::ClusterStatsResponse without_a;
  ASSERT_TRUE(cluster.Stats(without_a).ok());
  EXPECT_EQ(without_a.answered(), 1u);
  EXPECT_EQ(without_a.totals().tiers(0).chunks(), 0u) << "node-b was cleared";
  ASSERT_EQ(without_a.nodes_size(), 2);
  EXPECT_EQ(without_a.nodes(0).code(), 14);
}

// The cluster's events: a daemon that joins (RESYNCED), another's stores (EVENTS), and the first
// leaving (LEFT), each tagged with its instance, on one stream.
TEST(ControllerClusterTest, WatchEventsCarriesEveryDaemonsEvents) {
  auto controller = ControllerProcess::Start({.instance_timeout_ms = 10'000});
  ASSERT_TRUE(controller.ok()) << controller.status();
  ClusterClient cluster((*controller)->address());
  Node a = StartNode("node-a", (*controller)->address());
  ASSERT_NE(a.daemon, nullptr);
  ASSERT_TRUE(Eventually([&] { return cluster.Following() == "node-a"; }));

  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::ClusterWatchResponse>> stream = cluster.Watch(context);
  v1::ClusterWatchResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.batches_size(), 0) << "the stream opens with an empty response";

  Node b = StartNode("node-b", (*controller)->address());
  ASSERT_NE(b.daemon, nullptr);
  ASSERT_TRUE(Eventually([&] { return cluster.Following() == "node-a node-b"; }));
  ASSERT_TRUE(a.engine->Store(Chain(3), 64, 1).ok());
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(Chain(3)) == "node-a:3"; }));
  b.engine.reset();
  EXPECT_EQ(b.daemon->Stop().code, 0);

  // What came, in order, until node-b's departure (bounded by the stream's deadline and a count).
  std::vector<std::string> seen;
  uint32_t stored_on_a = 0;
  bool b_left = false;
  for (int reads = 0; reads < 100 && !b_left && stream->Read(&response); ++reads) {
    for (const v1::InstanceEvents& batch : response.batches()) {
      seen.push_back(batch.instance_id() + ":" + v1::InstanceEvents::Kind_Name(batch.kind()));
      if (batch.instance_id() == "node-a" && batch.kind() == v1::InstanceEvents::EVENTS) {
        for (const v1::ChunkEvent& event : batch.events()) stored_on_a += event.has_stored();
      }
      b_left = b_left || seen.back() == "node-b:LEFT";
    }
  }
  context.TryCancel();
  const std::string joined = fmt::format("{}", fmt::join(seen, " "));
  ASSERT_TRUE(b_left) << joined;
  EXPECT_EQ(stored_on_a, 3u) << joined;
  EXPECT_THAT(seen, ::testing::Contains("node-b:RESYNCED")) << joined;
  EXPECT_THAT(seen, ::testing::Not(::testing::Contains("node-a:RESYNCED"))) << joined;
}

using test_support::CliResult;

CliResult Cli(std::vector<std::string> args) {
  return test_support::RunCli(STRATA_CLI_PATH, std::move(args));
}

TEST(ControllerClusterTest, TheCliAsksTheController) {
  auto controller = ControllerProcess::Start();
  ASSERT_TRUE(controller.ok()) << controller.status();
  const std::string address = (*controller)->address();
  Node a = StartNode("node-a", address);
  ASSERT_NE(a.daemon, nullptr);
  const std::vector<ChunkKey> chain = Chain(4);
  ASSERT_TRUE(a.engine->Store({chain.begin(), chain.begin() + 3}, 64, 1).ok());
  ClusterClient cluster(address);
  bool complete = false;
  ASSERT_TRUE(
      Eventually([&] { return cluster.HeldPrefixes(chain, &complete) == "node-a:3" && complete; }));

  const std::vector<std::string> prompt = {
      "--tokens",       fmt::format("{}", fmt::join(ChainTokens(4), ",")),
      "--model",        "cluster-model",
      "--layers",       "2",
      "--kv-heads",     "2",
      "--head-dim",     "64",
      "--dtype",        "fp16",
      "--chunk-tokens", "64"};
  const auto with_prompt = [&](std::vector<std::string> args) {
    args.insert(args.end(), prompt.begin(), prompt.end());
    return args;
  };

  CliResult instances = Cli({"--controller", address, "instances"});
  EXPECT_EQ(instances.code, 0) << instances.err;
  EXPECT_THAT(instances.out, ::testing::HasSubstr("instance "));
  EXPECT_THAT(instances.out,
              ::testing::ContainsRegex("node-a +" + a.daemon->control_target() + " +yes "));

  CliResult lookup = Cli(with_prompt({"--controller", address, "lookup"}));
  EXPECT_EQ(lookup.code, 0) << lookup.err;
  EXPECT_EQ(lookup.out,
            "instance                             chunks     tokens  tiers\n"
            "node-a                               3 of 4        192  3 host\n");

  // The idle instance computes all 256 tokens; node-a, with a queue, still wins by its cache.
  CliResult route = Cli(with_prompt(
      {"--controller", address, "route", "--candidate", "idle", "--candidate", "node-a=10"}));
  EXPECT_EQ(route.code, 0) << route.err;
  EXPECT_THAT(route.out, ::testing::HasSubstr("256 prompt tokens"));
  EXPECT_THAT(route.out, ::testing::ContainsRegex("\n   1  node-a +[0-9.]+ +0\\.40 "));
  EXPECT_THAT(route.out, ::testing::ContainsRegex("\n   2  idle +10\\.24 "));
  CliResult json =
      Cli(with_prompt({"--controller", address, "route", "--json", "--candidate", "node-a"}));
  EXPECT_THAT(json.out, ::testing::HasSubstr("\"cached_tokens\":\"192\""));

  CliResult no_controller = Cli(with_prompt({"route", "--candidate", "a"}));
  EXPECT_EQ(no_controller.code, 2);
  EXPECT_THAT(no_controller.err, ::testing::HasSubstr("give --controller host:port"));
  CliResult node_command = Cli({"--controller", address, "status"});
  EXPECT_EQ(node_command.code, 2);
  EXPECT_THAT(node_command.err, ::testing::HasSubstr("the other commands ask a daemon"));

  // Node commands, forwarded: to every instance, or to --node.
  CliResult pin = Cli({"--controller", address, "pin", "--key", chain[0].ToString()});
  EXPECT_EQ(pin.code, 0) << pin.err;
  EXPECT_EQ(pin.out, "node-a:\n  pinned 1 chunks (64.0 KiB); 0 not cached\n");
  CliResult cluster_stats = Cli({"--controller", address, "stats"});
  EXPECT_EQ(cluster_stats.code, 0) << cluster_stats.err;
  EXPECT_THAT(cluster_stats.out,
              ::testing::HasSubstr("cluster: 1 instances, 1 indexed; index: 3 chunks"));
  EXPECT_THAT(cluster_stats.out, ::testing::HasSubstr("totals of 1 answering instances:\n  "));
  EXPECT_THAT(cluster_stats.out, ::testing::ContainsRegex("index: (complete|incomplete: .+)\n"));
  CliResult stats = Cli({"--controller", address, "--node", "node-a", "stats", "--json"});
  EXPECT_EQ(stats.code, 0) << stats.err;
  EXPECT_THAT(stats.out, ::testing::HasSubstr("\"instance_id\":\"node-a\""));
  EXPECT_THAT(stats.out, ::testing::HasSubstr("\"chunks\":\"3\""));
  CliResult unknown = Cli({"--controller", address, "--node", "node-z", "clear", "--all"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_THAT(unknown.err, ::testing::HasSubstr("NOT_FOUND"));
  CliResult node_without_controller = Cli({"--node", "node-a", "stats"});
  EXPECT_EQ(node_without_controller.code, 2);
  CliResult bad_candidate =
      Cli(with_prompt({"--controller", address, "route", "--candidate", "a=lots"}));
  EXPECT_EQ(bad_candidate.code, 2);
  EXPECT_THAT(bad_candidate.err, ::testing::HasSubstr("are not a number"));
  CliResult no_candidate = Cli(with_prompt({"--controller", address, "route", "--candidate", ""}));
  EXPECT_EQ(no_candidate.code, 2);
  EXPECT_THAT(no_candidate.err, ::testing::HasSubstr("INVALID_ARGUMENT"));
}

}  // namespace
}  // namespace strata
