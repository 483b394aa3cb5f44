// stratad's vLLM-format KV events over ZMQ PUB, received by a SUB socket and decoded by an
// independent msgpack implementation (python3-msgpack).
#include <zmq.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <regex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/key_hasher.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "gtest/gtest.h"
#include "proto/convert.h"
#include "tests/support/daemon_process.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/test_layout.h"

namespace strata {
namespace {

using test_support::DaemonProcess;
using test_support::RawEngineClient;

KvLayout EventsLayout() {
  return test_support::SmallLayout(
      {.model_id = "events-model", .head_dim = 64, .chunk_tokens = 64});
}

// Decodes every payload file given on the command line; prints one line per batch: the
// sequence number, the type of ts, and the events as JSON.
constexpr char kDecoder[] = R"(
import json, msgpack, sys
for path in sys.argv[1:]:
    frames = open(path, 'rb').read()
    seq = int.from_bytes(frames[:8], 'big')
    ts, events = msgpack.unpackb(frames[8:], raw=False)
    print(seq, type(ts).__name__, json.dumps(events, separators=(',', ':')))
)";

// Debian's interpreter, where python3-msgpack is installed.
constexpr char kPython[] = "/usr/bin/python3";

TEST(KvEvents, ZmqPublisherSpeaksVllmsFormat) {
  if (std::system((std::string(kPython) + " -c 'import msgpack' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << kPython << " cannot import msgpack (Debian package python3-msgpack)";
  }
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
      DaemonProcess::Start({.extra_args = {"--kv-events-endpoint", "tcp://127.0.0.1:*"}});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::smatch match;
  const std::string log = (*daemon)->Log();
  ASSERT_TRUE(std::regex_search(log, match, std::regex(R"(kv events on (tcp://[0-9.:]+))"))) << log;

  void* context = zmq_ctx_new();
  void* sub = zmq_socket(context, ZMQ_SUB);
  ASSERT_EQ(zmq_connect(sub, match[1].str().c_str()), 0);
  ASSERT_EQ(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0), 0);
  const int timeout_ms = 5000;
  zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // PUB/SUB: let the join settle

  RawEngineClient engine((*daemon)->engine_socket());
  absl::StatusOr<v1::EngineResponse> handshake = engine.Handshake(EventsLayout());
  ASSERT_TRUE(handshake.ok()) << handshake.status();
  // With a publisher, the daemon asks for each stored chunk's tokens.
  EXPECT_TRUE(handshake->handshake().kv_event_token_ids());
  std::vector<uint32_t> tokens(2 * 64);
  std::iota(tokens.begin(), tokens.end(), 1000);
  const std::vector<ChunkKey> keys = KeyHasher::Create(EventsLayout(), {})->PrefixKeys(tokens, {});
  {
    // Token ids that do not match the chunk's token count fail the item (nothing is stored).
    v1::EngineRequest bad;
    v1::StoreItem* item = bad.mutable_prepare_store()->add_items();
    *item->mutable_key() = ToProto(keys[0]);
    item->set_num_tokens(64);
    item->mutable_token_ids()->Add(tokens.begin(), tokens.begin() + 3);
    absl::StatusOr<v1::EngineResponse> refused = engine.Call(bad);
    ASSERT_TRUE(refused.ok()) << refused.status();
    ASSERT_EQ(refused->prepare_store().chunks_size(), 1);
    EXPECT_EQ(refused->prepare_store().chunks(0).status().code(),
              static_cast<int>(absl::StatusCode::kInvalidArgument));
  }
  ASSERT_TRUE(engine.Store(keys, 64, 1, true, "", tokens).ok());
  {
    grpc::ClientContext ctx;
    v1::ClearRequest one;
    *one.mutable_selector()->add_keys() = ToProto(keys[0]);
    v1::ClearResponse cleared;
    ASSERT_TRUE((*daemon)->control().Clear(&ctx, one, &cleared).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::ClearRequest all;
    all.set_all(true);
    v1::ClearResponse cleared;
    ASSERT_TRUE((*daemon)->control().Clear(&ctx, all, &cleared).ok());
  }

  // Receive batches until the four events arrived; each message is topic, sequence, payload.
  std::vector<std::string> files;
  int events_seen = 0;
  for (int message = 0; message < 4 && events_seen < 4; ++message) {
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t frame;
      zmq_msg_init(&frame);
      ASSERT_GE(zmq_msg_recv(&frame, sub, 0), 0) << "no KV event within 5 s";
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&frame)), zmq_msg_size(&frame));
      more = zmq_msg_more(&frame);
      zmq_msg_close(&frame);
    }
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(frames[0], "kv-events");
    ASSERT_EQ(frames[1].size(), 8u);
    const std::string path = ((*daemon)->dir() / fmt::format("batch{}.bin", message)).string();
    std::ofstream(path, std::ios::binary) << frames[1] << frames[2];
    files.push_back(path);
    // Count events cheaply: every event is a msgpack array whose first element names it.
    for (const char* name : {"BlockStored", "BlockRemoved", "AllBlocksCleared"}) {
      for (size_t at = frames[2].find(name); at != std::string::npos;
           at = frames[2].find(name, at + 1)) {
        ++events_seen;
      }
    }
  }
  zmq_close(sub);
  zmq_ctx_term(context);
  ASSERT_EQ(events_seen, 4);

  const std::filesystem::path script = (*daemon)->dir() / "decode.py";
  std::ofstream(script) << kDecoder;
  const std::filesystem::path out = (*daemon)->dir() / "decoded.txt";
  std::string command = std::string(kPython) + " " + script.string();
  for (const std::string& file : files) command += " " + file;
  command += " > " + out.string() + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream decoded_file(out);
  const std::string decoded((std::istreambuf_iterator<char>(decoded_file)), {});
  ASSERT_EQ(status, 0) << decoded;

  // Concatenate the batches' events; sequence numbers count batches from 0.
  std::string events;
  int expected_seq = 0;
  std::istringstream lines(decoded);
  for (std::string line; std::getline(lines, line); ++expected_seq) {
    std::istringstream fields(line);
    int seq;
    std::string ts_type, json;
    fields >> seq >> ts_type >> json;
    EXPECT_EQ(seq, expected_seq);
    EXPECT_EQ(ts_type, "float");
    ASSERT_GE(json.size(), 2u);
    events += (events.empty() ? "" : ",") + json.substr(1, json.size() - 2);
  }
  // BlockStored carries the chunk's tokens and its parent's id (announced just before).
  const std::span<const uint32_t> all(tokens);
  EXPECT_EQ(events, fmt::format("[\"BlockStored\",[{0}],null,[{2}],64,null,\"CPU\"],"
                                "[\"BlockStored\",[{1}],{0},[{3}],64,null,\"CPU\"],"
                                "[\"BlockRemoved\",[{0}],\"CPU\"],"
                                "[\"AllBlocksCleared\"]",
                                keys[0].EventId(), keys[1].EventId(), fmt::join(all.first(64), ","),
                                fmt::join(all.subspan(64), ",")));
}

TEST(KvEvents, WithoutAPublisherConnectorsSendNoTokens) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  RawEngineClient engine((*daemon)->engine_socket());
  absl::StatusOr<v1::EngineResponse> handshake = engine.Handshake(EventsLayout());
  ASSERT_TRUE(handshake.ok()) << handshake.status();
  EXPECT_FALSE(handshake->handshake().kv_event_token_ids());
}

}  // namespace
}  // namespace strata
