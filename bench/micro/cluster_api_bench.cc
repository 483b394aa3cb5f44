// cluster_api_bench: strata-controller's cluster API and its vLLM event feed, in one process over
// loopback (a Controller, a ZMQ PUB socket in vLLM's place, gRPC clients).
//
// The controller indexes one plain vLLM engine ([vllm] instances) whose events this bench
// publishes, with 256-token blocks, then:
//   1. ingest: --batches messages of --blocks-per-batch stored blocks each (one BlockStored of a
//      fresh prompt per message), published as fast as the socket takes them: blocks over the
//      time until the last prompt is in the index, and over the CPU time of the feed's thread
//      (receive, decode, keying from token ids, index ingest: one thread per engine). No target
//      of its own; the index alone has one (controller_bench).
//   2. Lookup by the 32K tokens of a prompt the engine holds whole (128 chunks, tokens_fixed32:
//      what routers send; the controller hashes them) against a trivial unary call
//      (ListInstances with no daemon registered), alternately, --calls of each: the throughput
//      ratio, whose target for the controller is >= 0.5x a trivial unary call's rate, in the
//      same run.
// Exit status 0 when the run completed (a missed target included), 1 when a check failed.
//
// Usage: cluster_api_bench [--batches=N] [--blocks-per-batch=N] [--calls=N]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/support/model_layouts.h"
#include "controller/ingest/testing/vllm_batch_writer.h"
#include "controller/ingest/testing/zmq_engine_publisher.h"
#include "controller/server/controller.h"
#include "core/key_hasher.h"
#include "core/process_malloc.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "proto/convert.h"

namespace strata::controller {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  uint32_t batches = 8'000;
  uint32_t blocks_per_batch = 16;
  uint32_t calls = 2'000;
};

constexpr uint32_t kBlockTokens = 256;
constexpr uint32_t kPromptChunks = 128;

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "cluster_api_bench: %s\n", message.c_str());
  std::exit(1);
}

KvLayout EngineLayout() { return bench::Llama8bLayout(); }

// The engine's side, numbering its messages.
class EnginePublisher {
 public:
  EnginePublisher() {
    if (socket_.endpoint().empty()) Fail("cannot bind a ZMQ PUB socket on loopback");
  }
  const std::string& endpoint() const { return socket_.endpoint(); }
  void Send(const std::string& payload) { socket_.Send(sequence_++, payload); }

 private:
  testing::ZmqEnginePublisher socket_;
  uint64_t sequence_ = 0;
};

// A prompt of `blocks` blocks whose tokens start at `first`, as one BlockStored.
std::string StoredPrompt(uint64_t hash_base, uint32_t first, uint32_t blocks,
                         std::vector<uint32_t>* tokens_out = nullptr) {
  testing::VllmBatchWriter::Stored stored{.block_size = kBlockTokens};
  for (uint32_t b = 0; b < blocks; ++b) stored.hashes.push_back(hash_base + b);
  for (uint32_t t = 0; t < blocks * kBlockTokens; ++t) stored.tokens.push_back(first + t);
  if (tokens_out != nullptr) *tokens_out = stored.tokens;
  return testing::VllmBatchWriter().Add(std::move(stored)).Payload();
}

class ClusterClient {
 public:
  explicit ClusterClient(int port)
      : stub_(v1::StrataCluster::NewStub(grpc::CreateChannel(
            fmt::format("127.0.0.1:{}", port), grpc::InsecureChannelCredentials()))) {}

  // Chunks of `request`'s prompt the engine holds (0 when it holds none).
  uint32_t Held(const v1::LookupRequest& request) {
    grpc::ClientContext context;
    v1::ClusterLookupResponse response;
    const grpc::Status status = stub_->Lookup(&context, request, &response);
    if (!status.ok()) Fail("Lookup: " + status.error_message());
    return response.instances_size() > 0 ? response.instances(0).matched_chunks() : 0;
  }
  void ListInstances() {
    grpc::ClientContext context;
    v1::ListInstancesResponse response;
    const grpc::Status status = stub_->ListInstances(&context, {}, &response);
    if (!status.ok()) Fail("ListInstances: " + status.error_message());
  }

 private:
  std::unique_ptr<v1::StrataCluster::Stub> stub_;
};

v1::LookupRequest PromptLookup(const std::vector<uint32_t>& tokens) {
  v1::LookupRequest request;
  *request.mutable_layout() = ToProto(EngineLayout());
  request.mutable_tokens_fixed32()->Assign(tokens.begin(), tokens.end());
  return request;
}

// Nanoseconds the thread named `name` of this process has run on a CPU
// (/proc/self/task/<tid>/schedstat); fails when no thread has that name.
uint64_t ThreadCpuNanos(const std::string& name) {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::string comm;
    std::ifstream(task.path() / "comm") >> comm;
    if (comm != name) continue;
    uint64_t on_cpu_ns = 0;
    std::ifstream(task.path() / "schedstat") >> on_cpu_ns;
    return on_cpu_ns;
  }
  Fail("no thread named " + name);
}

// Polls until the engine's prompt of `request` is held whole; false after 60 s.
bool WaitHeld(ClusterClient& client, const v1::LookupRequest& request, uint32_t chunks) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (client.Held(request) != chunks) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

int Run(const Flags& flags) {
  EnginePublisher engine;
  ControllerConfig config;
  config.controller.listen_address = "127.0.0.1:0";
  config.log.level = "warn";
  const KvLayout layout = EngineLayout();
  config.vllm.instances = {"bench-engine=" + engine.endpoint()};
  config.vllm.model = layout.model_id;
  config.vllm.layers = layout.num_layers;
  config.vllm.kv_heads = layout.num_kv_heads;
  config.vllm.head_dim = layout.head_dim;
  config.vllm.dtype = DtypeName(layout.dtype);
  config.vllm.block_size = kBlockTokens;
  absl::StatusOr<std::unique_ptr<Controller>> controller = Controller::Create(config);
  if (!controller.ok()) Fail(controller.status().ToString());
  if (absl::Status started = (*controller)->Start(); !started.ok()) Fail(started.ToString());
  ClusterClient client((*controller)->port());

  // The 32K-token prompt, published until the subscription has taken it.
  std::vector<uint32_t> prompt;
  const std::string prompt_batch = StoredPrompt(1, 0, kPromptChunks, &prompt);
  const v1::LookupRequest prompt_lookup = PromptLookup(prompt);
  const Clock::time_point subscribe_deadline = Clock::now() + std::chrono::seconds(10);
  while (client.Held(prompt_lookup) != kPromptChunks) {
    if (Clock::now() >= subscribe_deadline) Fail("the controller never indexed the engine");
    engine.Send(prompt_batch);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  // 1. Ingest.
  std::vector<std::string> batches;
  std::vector<uint32_t> last_tokens;
  for (uint32_t i = 0; i < flags.batches; ++i) {
    const uint32_t first = 1'000'000 + i * flags.blocks_per_batch * kBlockTokens;
    batches.push_back(StoredPrompt(uint64_t{1'000'000} + uint64_t{i} * flags.blocks_per_batch,
                                   first, flags.blocks_per_batch,
                                   i + 1 == flags.batches ? &last_tokens : nullptr));
  }
  const uint64_t feed_ns0 = ThreadCpuNanos("strata-vllmfeed");
  const Clock::time_point t0 = Clock::now();
  for (const std::string& batch : batches) engine.Send(batch);
  if (!WaitHeld(client, PromptLookup(last_tokens), flags.blocks_per_batch)) {
    Fail("the last prompt never reached the index (a message lost?)");
  }
  const double ingest_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double feed_s = double(ThreadCpuNanos("strata-vllmfeed") - feed_ns0) * 1e-9;
  const double blocks = double(flags.batches) * flags.blocks_per_batch;
  std::printf(
      "vLLM event ingest, %u messages x %u blocks of %u tokens: %.3f s end to end, %.2f M "
      "blocks/s (the publisher, ZMQ and the polling lookups share the cores); the feed's thread "
      "ran %.3f s: %.1f us per message, %.2f M blocks per CPU-second (receive, decode, key, "
      "index)\n",
      flags.batches, flags.blocks_per_batch, kBlockTokens, ingest_s, blocks / ingest_s / 1e6,
      feed_s, feed_s / flags.batches * 1e6, blocks / feed_s / 1e6);
  if (client.Held(prompt_lookup) != kPromptChunks) Fail("the 32K-token prompt left the index");

  // 2. Lookup by 32K tokens against the trivial call, alternately.
  double list_s = 0;
  double lookup_s = 0;
  for (uint32_t i = 0; i < flags.calls; ++i) {
    const Clock::time_point a = Clock::now();
    client.ListInstances();
    const Clock::time_point b = Clock::now();
    if (client.Held(prompt_lookup) != kPromptChunks) Fail("a lookup missed the prompt");
    list_s += std::chrono::duration<double>(b - a).count();
    lookup_s += std::chrono::duration<double>(Clock::now() - b).count();
  }
  const double ratio = list_s / lookup_s;
  std::printf(
      "Lookup by 32K tokens (128 chunks, tokens_fixed32): %.1f us/call; ListInstances: "
      "%.1f us/call; throughput ratio %.2fx (target >= 0.5x: %s)\n",
      lookup_s / flags.calls * 1e6, list_s / flags.calls * 1e6, ratio,
      ratio >= 0.5 ? "met" : "MISSED");
  (*controller)->Stop();
  return 0;
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&arg](const char* name) -> std::optional<uint32_t> {
      const std::string prefix = fmt::format("--{}=", name);
      if (arg.rfind(prefix, 0) != 0) return std::nullopt;
      return static_cast<uint32_t>(std::stoul(arg.substr(prefix.size())));
    };
    if (auto v = value("batches")) {
      flags.batches = *v;
    } else if (auto v = value("blocks-per-batch")) {
      flags.blocks_per_batch = *v;
    } else if (auto v = value("calls")) {
      flags.calls = *v;
    } else {
      Fail("unknown flag " + arg);
    }
  }
  if (flags.batches == 0 || flags.blocks_per_batch == 0 || flags.calls == 0) {
    Fail("every count must be positive");
  }
  return flags;
}

}  // namespace
}  // namespace strata::controller

int main(int argc, char** argv) {
  strata::TuneMallocForLargeBuffers();  // as strata-controller does
  return strata::controller::Run(strata::controller::ParseFlags(argc, argv));
}
