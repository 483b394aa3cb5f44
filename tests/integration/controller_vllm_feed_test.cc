// strata-controller indexing an engine that has no Strata daemon registered with it, from the
// vLLM-format KV events the engine publishes over ZMQ ([vllm] instances, controller/ingest/
// vllm_feed.h). The engine here is a real stratad publishing its KV events in vLLM's format
// (--kv-events-endpoint) and not registered with the controller: the controller keys its blocks
// from their token ids, and its Lookup answers follow the engine's stores and removals, until the
// engine dies and its chunks are cleared.
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "core/key_hasher.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
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

KvLayout EngineLayout() {
  return test_support::SmallLayout({.model_id = "vllm-model", .head_dim = 64, .chunk_tokens = 64});
}

std::vector<uint32_t> Tokens(size_t chunks, uint32_t first) {
  std::vector<uint32_t> tokens(chunks * 64);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(ControllerVllmFeedTest, AnEnginesKvEventsReachTheClusterLookup) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> engine_daemon =
      DaemonProcess::Start({.extra_args = {"--kv-events-endpoint", "tcp://127.0.0.1:*"}});
  ASSERT_TRUE(engine_daemon.ok()) << engine_daemon.status();
  std::smatch match;
  const std::string log = (*engine_daemon)->Log();
  ASSERT_TRUE(std::regex_search(log, match, std::regex(R"(kv events on (tcp://[0-9.:]+))"))) << log;

  auto controller = ControllerProcess::Start(
      {.extra_toml = fmt::format("[vllm]\ninstances = [\"plain-a={}\"]\n"
                                 "model = \"vllm-model\"\nlayers = 2\n"
                                 "kv_heads = 2\nhead_dim = 64\ndtype = \"fp16\"\n"
                                 "block_size = 64\n"
                                 "[daemons]\nunreachable_timeout_ms = 1000\n",
                                 match[1].str())});
  ASSERT_TRUE(controller.ok()) << controller.status();
  ClusterClient cluster((*controller)->address());

  RawEngineClient engine((*engine_daemon)->engine_socket());
  ASSERT_TRUE(engine.Handshake(EngineLayout()).ok());
  const KeyHasher hasher = *KeyHasher::Create(EngineLayout(), {});

  // A subscription takes a moment to reach the PUB socket, which drops what it publishes before:
  // store one-chunk prompts until the controller has seen one.
  bool subscribed = false;
  for (uint32_t probe = 0; probe < 100 && !subscribed; ++probe) {
    const std::vector<uint32_t> tokens = Tokens(1, 100'000 + probe * 64);
    const std::vector<ChunkKey> key = hasher.PrefixKeys(tokens, {});
    ASSERT_TRUE(engine.Store(key, 64, 1, true, "", tokens).ok());
    subscribed = Eventually([&] { return cluster.HeldPrefixes(key) == "plain-a:1"; }, 100ms);
  }
  ASSERT_TRUE(subscribed) << (*controller)->Log();

  const std::vector<uint32_t> tokens = Tokens(3, 2000);
  const std::vector<ChunkKey> chain = hasher.PrefixKeys(tokens, {});
  ASSERT_TRUE(engine.Store(chain, 64, 2, true, "", tokens).ok());
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(chain) == "plain-a:3"; }))
      << cluster.HeldPrefixes(chain) << "\n"
      << (*controller)->Log();

  {
    grpc::ClientContext context;
    v1::ClearRequest clear;
    *clear.mutable_selector()->add_keys() = ToProto(chain[1]);
    v1::ClearResponse cleared;
    ASSERT_TRUE((*engine_daemon)->control().Clear(&context, clear, &cleared).ok());
  }
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(chain) == "plain-a:1"; }))
      << cluster.HeldPrefixes(chain);

  // The engine dies: its chunks leave the answers after daemons.unreachable_timeout_ms.
  (*engine_daemon)->Kill();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return cluster.HeldPrefixes(chain).empty(); }))
      << cluster.HeldPrefixes(chain);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 5s);
  EXPECT_NE((*controller)->Log().find("'plain-a': " + match[1].str() + " unreachable"),
            std::string::npos)
      << (*controller)->Log();
}

// A [vllm] instance whose id a daemon then registers with: the daemon is refused, the engine's
// feed goes on.
TEST(ControllerVllmFeedTest, ADaemonCannotTakeAnEnginesId) {
  auto controller = ControllerProcess::Start(
      {.extra_toml = "[vllm]\ninstances = [\"shared-id=tcp://127.0.0.1:1\"]\nmodel = \"m\"\n"
                     "layers = 2\nkv_heads = 2\nhead_dim = 64\n"});
  ASSERT_TRUE(controller.ok()) << controller.status();
  ClusterClient cluster((*controller)->address());
  v1::RegisterInstanceRequest request;
  request.set_instance_id("shared-id");
  request.set_control_endpoint("127.0.0.1:2");
  v1::RegisterInstanceResponse response;
  grpc::ClientContext context;
  const grpc::Status status =
      (*controller)->cluster().RegisterInstance(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
}

}  // namespace
}  // namespace strata
