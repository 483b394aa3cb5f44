// strata-controller's high availability on a real etcd (Debian's etcd-server, on loopback): two
// controllers elect a leader through etcd; the standby refuses calls and names the leader; three
// daemons register with the leader; when the leader is killed the standby takes over within
// 5 s, adopting the daemons' registrations (leases included) from etcd, and answers only once its
// index is whole again; a leader that stops cleanly hands over at once; the member records in
// etcd are fenced by the election. Skipped, with the reason, where etcd is not installed.
#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "controller/leadership/etcd_member_store.h"
#include "controller/leadership/leader_election.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/cli_process.h"
#include "tests/support/cluster_client.h"
#include "tests/support/controller_process.h"
#include "tests/support/daemon_process.h"
#include "tests/support/etcd_process.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/test_layout.h"

namespace strata {
namespace {

using namespace std::chrono_literals;
using test_support::ClusterClient;
using test_support::ControllerProcess;
using test_support::DaemonProcess;
using test_support::EtcdProcess;
using test_support::Eventually;
using test_support::RawEngineClient;

KvLayout HaLayout() {
  return test_support::SmallLayout({.model_id = "ha-model", .head_dim = 64, .chunk_tokens = 64});
}

std::vector<ChunkKey> Chain(size_t chunks, uint32_t first_token) {
  std::vector<uint32_t> tokens(chunks * 64);
  std::iota(tokens.begin(), tokens.end(), first_token);
  return KeyHasher::Create(HaLayout(), {})->PrefixKeys(tokens, {});
}

struct Node {
  std::unique_ptr<DaemonProcess> daemon;
  std::unique_ptr<RawEngineClient> engine;
};

class ControllerHaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdProcess::Installed()) {
      GTEST_SKIP() << "etcd is not installed at " << EtcdProcess::kBinary
                   << " (Debian's etcd-server; scripts/install-deps.sh installs it)";
    }
    absl::StatusOr<std::unique_ptr<EtcdProcess>> etcd = EtcdProcess::Start();
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = *std::move(etcd);
  }

  std::unique_ptr<ControllerProcess> StartController() {
    absl::StatusOr<std::unique_ptr<ControllerProcess>> controller = ControllerProcess::Start(
        {.instance_timeout_ms = 5'000,
         .extra_toml = fmt::format("[cluster]\netcd_endpoints = [\"{}\"]\n", etcd_->endpoint())});
    EXPECT_TRUE(controller.ok()) << controller.status();
    return controller.ok() ? *std::move(controller) : nullptr;
  }

  Node StartNode(const std::string& id, const std::vector<std::string>& controllers) {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
        {.extra_toml = fmt::format("[cluster]\ncontrollers = [\"{}\"]\ninstance_id = \"{}\"\n",
                                   fmt::join(controllers, "\", \""), id)});
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    if (!daemon.ok()) return {};
    Node node{.daemon = *std::move(daemon)};
    node.engine = std::make_unique<RawEngineClient>(node.daemon->engine_socket());
    EXPECT_TRUE(node.engine->Handshake(HaLayout()).ok());
    return node;
  }

  std::unique_ptr<EtcdProcess> etcd_;
};

TEST_F(ControllerHaTest, AStandbyTakesOverWithinFiveSecondsWithACorrectIndex) {
  std::unique_ptr<ControllerProcess> first = StartController();
  ASSERT_NE(first, nullptr);
  ClusterClient leader(first->address());
  const std::vector<ChunkKey> chain = Chain(4, 100);
  const std::vector<ChunkKey> other = Chain(2, 9000);
  ASSERT_TRUE(Eventually([&] { return leader.HeldPrefixes(chain).empty(); }, 10s))
      << leader.HeldPrefixes(chain) << "\n"
      << first->Log();

  std::unique_ptr<ControllerProcess> second = StartController();
  ASSERT_NE(second, nullptr);
  ClusterClient standby(second->address());
  std::this_thread::sleep_for(500ms);  // it has campaigned, and lost
  EXPECT_EQ(standby.HeldPrefixes(chain),
            fmt::format("error 14: this strata-controller is a standby; the leader is {}",
                        first->address()));

  const std::vector<std::string> both = {first->address(), second->address()};
  Node a = StartNode("node-a", both);
  Node b = StartNode("node-b", both);
  Node c = StartNode("node-c", both);
  ASSERT_NE(c.daemon, nullptr);
  ASSERT_TRUE(a.engine->Store(chain, 64, 1).ok());
  ASSERT_TRUE(b.engine->Store({chain[0], chain[1]}, 64, 1).ok());
  ASSERT_TRUE(c.engine->Store(other, 64, 1).ok());
  ASSERT_TRUE(Eventually(
      [&] {
        return leader.HeldPrefixes(chain) == "node-a:4 node-b:2" &&
               leader.HeldPrefixes(other) == "node-c:2";
      },
      10s))
      << leader.HeldPrefixes(chain);

  const std::string leases = leader.Leases();
  first->Kill();
  const auto killed = std::chrono::steady_clock::now();
  // Correct means honest: an answer that leaves out a chunk a daemon holds says it is incomplete;
  // one that says it is complete holds every chunk.
  std::vector<std::string> partial;
  ASSERT_TRUE(Eventually(
      [&] {
        bool complete = false;
        bool complete_other = false;
        const std::string held = standby.HeldPrefixes(chain, &complete);
        const std::string held_other = standby.HeldPrefixes(other, &complete_other);
        for (const auto& [answer, whole, flagged] :
             {std::tuple(held, std::string("node-a:4 node-b:2"), complete),
              std::tuple(held_other, std::string("node-c:2"), complete_other)}) {
          if (flagged && answer != whole) partial.push_back(answer);
        }
        return complete && complete_other && held == "node-a:4 node-b:2" &&
               held_other == "node-c:2";
      },
      15s))
      << standby.HeldPrefixes(chain) << "\n"
      << second->Log();
  EXPECT_TRUE(partial.empty()) << "partial answers flagged complete: "
                               << fmt::format("{}", fmt::join(partial, "; "));
  const auto took = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(took, 5s) << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                      << " ms";
  std::cout << "standby served the whole index "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
            << " ms after the leader's death\n";
  // It adopted the registrations: the daemons kept their leases (none registered again).
  EXPECT_EQ(standby.Leases(), leases);

  // The new leader follows the daemons from here on.
  ASSERT_TRUE(c.engine->Store({chain[0]}, 64, 2).ok());
  EXPECT_TRUE(
      Eventually([&] { return standby.HeldPrefixes(chain) == "node-a:4 node-b:2 node-c:1"; }, 10s))
      << standby.HeldPrefixes(chain);
}

TEST_F(ControllerHaTest, ALeaderThatStopsHandsOverAtOnce) {
  std::unique_ptr<ControllerProcess> first = StartController();
  ASSERT_NE(first, nullptr);
  ClusterClient leader(first->address());
  const std::vector<ChunkKey> chain = Chain(2, 500);
  ASSERT_TRUE(Eventually([&] { return leader.HeldPrefixes(chain).empty(); }, 10s));
  std::unique_ptr<ControllerProcess> second = StartController();
  ASSERT_NE(second, nullptr);
  ClusterClient standby(second->address());
  Node a = StartNode("node-a", {first->address(), second->address()});
  ASSERT_NE(a.daemon, nullptr);
  ASSERT_TRUE(a.engine->Store(chain, 64, 1).ok());
  ASSERT_TRUE(Eventually([&] { return leader.HeldPrefixes(chain) == "node-a:2"; }, 10s));

  // The CLI, given both controllers, finds the leader whichever comes first.
  const std::string standby_first = second->address() + "," + first->address();
  test_support::CliResult instances =
      test_support::RunCli(STRATA_CLI_PATH, {"--controller", standby_first, "instances"});
  EXPECT_EQ(instances.code, 0) << instances.err;
  EXPECT_THAT(instances.out, ::testing::HasSubstr("node-a"));

  EXPECT_EQ(first->Stop(), 0);
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return standby.HeldPrefixes(chain) == "node-a:2"; }, 10s))
      << standby.HeldPrefixes(chain);
  // The lease was revoked: no wait for its TTL.
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 3s);
  // The first listed is gone: the next answers.
  const std::string stopped_first = first->address() + "," + second->address();
  instances = test_support::RunCli(STRATA_CLI_PATH, {"--controller", stopped_first, "instances"});
  EXPECT_EQ(instances.code, 0) << instances.err;
  EXPECT_THAT(instances.out, ::testing::HasSubstr("node-a"));
}

// The member records are written only by the controller that holds the election key.
TEST_F(ControllerHaTest, MemberRecordsAreFencedByTheElection) {
  using controller::EtcdClient;
  using controller::EtcdMemberStore;
  auto etcd = std::make_shared<EtcdClient>(std::vector<std::string>{etcd_->endpoint()});
  const std::string key = "/strata/test/leader";
  absl::StatusOr<std::unique_ptr<controller::LeaderElection>> election =
      controller::LeaderElection::Start({.etcd = etcd, .key = key, .candidate = "leader:1"});
  ASSERT_TRUE(election.ok()) << election.status();
  ASSERT_TRUE(Eventually([&] { return (*election)->state().leading; }, 10s));

  EtcdMemberStore leading({.etcd = etcd, .prefix = key + "/members/", .election_key = key});
  EtcdMemberStore deposed({.etcd = etcd, .prefix = key + "/members/", .election_key = key});
  EXPECT_EQ(leading.Record({}).code(), absl::StatusCode::kFailedPrecondition);  // no candidate
  leading.SetCandidate("leader:1");
  deposed.SetCandidate("leader:0");
  v1::InstanceRecord record;
  record.mutable_registration()->set_instance_id("node-a");
  record.mutable_registration()->set_control_endpoint("127.0.0.1:7000");
  record.set_lease_id(42);
  ASSERT_TRUE(leading.Record(record).ok());
  record.mutable_registration()->set_instance_id("node-b");
  record.set_lease_id(43);
  ASSERT_TRUE(leading.Record(record).ok());
  EXPECT_EQ(deposed.Record(record).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(deposed.Forget("node-a").code(), absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<std::vector<v1::InstanceRecord>> records = deposed.Load();  // reads: unfenced
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].registration().instance_id(), "node-a");
  EXPECT_EQ((*records)[0].lease_id(), 42u);
  EXPECT_EQ((*records)[1].lease_id(), 43u);

  ASSERT_TRUE(leading.Forget("node-a").ok());
  ASSERT_TRUE(leading.Forget("node-a").ok());  // forgetting twice is not an error
  records = leading.Load();
  ASSERT_TRUE(records.ok());
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].registration().instance_id(), "node-b");

  // Stopped, the election revokes its lease and the key goes: nobody writes any more.
  election->reset();
  EXPECT_EQ(leading.Record(record).code(), absl::StatusCode::kFailedPrecondition);
  // etcd gone: reads and writes fail UNAVAILABLE.
  etcd_.reset();
  EXPECT_EQ(leading.Load().status().code(), absl::StatusCode::kUnavailable);
}

// Without etcd there is no leader: the controller refuses every call rather than answer from an
// index no election stands behind.
TEST(ControllerWithoutEtcdTest, NoElectionNoAnswers) {
  absl::StatusOr<std::unique_ptr<ControllerProcess>> controller =
      ControllerProcess::Start({.extra_toml = "[cluster]\netcd_endpoints = [\"127.0.0.1:1\"]\n"});
  ASSERT_TRUE(controller.ok()) << controller.status();
  ClusterClient cut_off((*controller)->address());
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(cut_off.HeldPrefixes(Chain(1, 0)),
            "error 14: this strata-controller is a standby; the leader is not known yet");
}

}  // namespace
}  // namespace strata
