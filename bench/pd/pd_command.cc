#include "bench/pd/pd_command.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "bench/support/model_layouts.h"
#include "bench/support/remote_baselines.h"
#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "grpcpp/client_context.h"
#include "tests/support/daemon_process.h"
#include "tests/support/json_fields.h"
#include "tests/support/raw_engine_client.h"
#include "tests/support/subprocess.h"

namespace strata::bench {
namespace {

using std::chrono::milliseconds;
using test_support::JsonInt;

constexpr char kPrefillNode[] = "prefill-0";
constexpr char kDecodeNode[] = "decode-0";

// FLOPs of one Llama-3.1-8B layer's prefill of `n` tokens: 2 FLOPs per weight and token over
// the layer's 218,103,808 weights (Q and O 4096x4096, K and V 4096x1024, gate, up and down
// 4096x14336), plus causal attention, QK^T and AV over 32 heads of 128: 2 * 4096 * n^2.
double LayerFlops(double n) { return 2.0 * 218'103'808.0 * n + 2.0 * 4096.0 * n * n; }

struct Run {
  double prefill_ms = 0;    // the prefill engine's step: modelled compute, then its saves
  double save_tail_ms = 0;  // of which the saves after the last layer
  double load_ms = 0;       // the decoder's asynchronous load: the fetch from A
  uint64_t bytes = 0;
  int64_t matched = 0;
  int64_t failed_blocks = 0;
  int64_t wrong = 0;
};

// A daemon with its remote tier on; `dial` empty: dials nobody.
absl::StatusOr<std::unique_ptr<test_support::DaemonProcess>> StartDaemon(
    const PdOptions& o, const std::string& capacity, const std::string& token_file,
    const std::string& node_id, const std::string& dial) {
  return test_support::DaemonProcess::Start(
      {.host_capacity = capacity,
       .prefault = o.prefault,
       .extra_toml =
           fmt::format("[remote]\nlisten_address = \"127.0.0.1:0\"\ncluster_token_file = \"{}\"\n"
                       "node_id = \"{}\"\ntransports = \"{}\"\nnet_devices = \"{}\"\npeers = [{}]\n"
                       "fetch_timeout_ms = 60000\n",
                       token_file, node_id, o.transports, o.net_devices,
                       dial.empty() ? "" : fmt::format("\"{}\"", dial))});
}

// The address the daemon's log says its peers reach it on; "" when it does not say.
std::string RemoteAddress(const test_support::DaemonProcess& daemon) {
  const std::string log = daemon.Log();
  const std::string marker = ") on ";
  const size_t at = log.find("peers reach this node (");
  if (at == std::string::npos) return "";
  const size_t on = log.find(marker, at);
  const size_t end = log.find(';', on);
  if (on == std::string::npos || end == std::string::npos) return "";
  return log.substr(on + marker.size(), end - on - marker.size());
}

// Waits (10 s at most) until B's daemon admits A: a lookup naming A is answered.
bool AwaitAdmission(const std::string& socket, const KvLayout& layout) {
  test_support::RawEngineClient probe(socket);
  if (!probe.Handshake(layout).ok()) return false;
  const std::vector<uint32_t> tokens(layout.chunk_tokens, 1);
  const std::vector<ChunkKey> keys = KeyHasher::Create(layout, {})->PrefixKeys(tokens, {});
  for (int attempt = 0; attempt < 400; ++attempt) {
    v1::EngineRequest lookup = test_support::LookupRequest(keys);
    lookup.mutable_lookup()->set_source_node(kPrefillNode);
    absl::StatusOr<v1::EngineResponse> answer = probe.Call(std::move(lookup));
    if (answer.ok() && answer->status().code() == 0) return true;
    std::this_thread::sleep_for(milliseconds(25));
  }
  return false;
}

// Removes every chunk the daemon holds (control Clear).
absl::Status ClearAll(test_support::DaemonProcess& daemon) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::ClearRequest request;
  request.set_all(true);
  v1::ClearResponse response;
  const grpc::Status status = daemon.control().Clear(&context, request, &response);
  return status.ok() ? absl::OkStatus()
                     : absl::UnavailableError(fmt::format("Clear: {}", status.error_message()));
}

// Runs one sim_engine request to its end; its request line, or the reason it failed.
absl::StatusOr<std::string> RunEngine(std::vector<std::string> args) {
  std::vector<std::string> argv = {STRATA_SIM_ENGINE_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  test_support::Subprocess engine(std::move(argv));
  if (engine.Wait(milliseconds(600'000)) != 0) {
    return absl::InternalError(fmt::format("sim_engine failed: {}", engine.Stderr()));
  }
  for (const std::string& line : engine.StdoutLines()) {
    if (line.starts_with("{\"request\"")) return line;
  }
  return absl::InternalError("sim_engine printed no request line");
}

}  // namespace

int RunPdCommand(const PdOptions& o) {
  absl::StatusOr<KvLayout> layout = SimLayout(o.geometry, o.chunk_tokens);
  if (!layout.ok() || o.prompt_tokens < 2 * o.chunk_tokens || o.utilisation <= 0) {
    std::cerr << fmt::format("strata-bench pd: {}\n",
                             layout.ok() ? "the prompt must span two chunks, at a utilisation > 0"
                                         : std::string(layout.status().message()));
    return 1;
  }
  const uint64_t kv_bytes = uint64_t{o.prompt_tokens} * layout->bytes_per_token();
  const double layer_ms =
      LayerFlops(o.prompt_tokens) / (o.peak_tflops * 1e12 * o.utilisation) * 1e3;
  const double modelled_prefill_ms = layer_ms * layout->num_layers;
  const uint64_t chunk_bytes = layout->chunk_bytes(o.chunk_tokens);

  // The baseline: ucx_perftest moving the same bytes in messages of one chunk.
  absl::StatusOr<double> perftest = MeasurePerftest({.test = "ucp_am_bw",
                                                     .transports = o.transports,
                                                     .net_devices = o.net_devices,
                                                     .message_bytes = chunk_bytes,
                                                     .messages = kv_bytes / chunk_bytes,
                                                     .warmup = 8,
                                                     .timeout = std::chrono::seconds(120)});

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("strata-bench-pd-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const std::string token_file = (dir / "cluster-token").string();
  std::ofstream(token_file) << "strata-bench-pd\n";
  const std::string capacity = fmt::format("{}MiB", (kv_bytes * 5 / 4 >> 20) + 64);
  auto prefill_daemon = StartDaemon(o, capacity, token_file, kPrefillNode, "");
  if (!prefill_daemon.ok()) {
    std::cerr << fmt::format("strata-bench pd: daemon A: {}\n", prefill_daemon.status());
    return 1;
  }
  auto decode_daemon =
      StartDaemon(o, capacity, token_file, kDecodeNode, RemoteAddress(**prefill_daemon));
  if (!decode_daemon.ok()) {
    std::cerr << fmt::format("strata-bench pd: daemon B: {}\n", decode_daemon.status());
    return 1;
  }
  if (!AwaitAdmission((*decode_daemon)->engine_socket(), *layout)) {
    std::cerr << "strata-bench pd: daemon B never admitted daemon A:\n" << (*decode_daemon)->Log();
    return 1;
  }

  const std::vector<std::string> common = {
      "--geometry",     o.geometry,
      "--chunk-tokens", std::to_string(o.chunk_tokens),
      "--num-blocks",   std::to_string(o.prompt_tokens / 16 + 16),
      "--precompute",   "--io-timeout-ms",
      "120000"};
  std::vector<Run> runs;
  for (uint32_t r = 0; r < o.runs; ++r) {
    for (auto* daemon : {&*prefill_daemon, &*decode_daemon}) {
      if (absl::Status cleared = ClearAll(**daemon); r > 0 && !cleared.ok()) {
        std::cerr << fmt::format("strata-bench pd: {}\n", cleared);
        return 1;
      }
    }
    const std::string prompt = fmt::format("{}:{}", 500 + r, o.prompt_tokens);
    std::vector<std::string> prefill_args = {
        "--socket",         (*prefill_daemon)->engine_socket(),
        "--prompt",         prompt,
        "--kv-transfer",    "send",
        "--layer-delay-us", std::to_string(static_cast<int64_t>(layer_ms * 1e3))};
    prefill_args.insert(prefill_args.end(), common.begin(), common.end());
    absl::StatusOr<std::string> prefill = RunEngine(prefill_args);
    std::vector<std::string> decode_args = {"--socket",      (*decode_daemon)->engine_socket(),
                                            "--prompt",      prompt,
                                            "--kv-transfer", "receive",
                                            "--source-node", kPrefillNode};
    decode_args.insert(decode_args.end(), common.begin(), common.end());
    absl::StatusOr<std::string> decode =
        prefill.ok() ? RunEngine(decode_args) : absl::StatusOr<std::string>(prefill.status());
    if (!decode.ok()) {
      std::cerr << fmt::format("strata-bench pd: {}\n", decode.status());
      return 1;
    }
    runs.push_back({.prefill_ms = JsonInt(*prefill, "step_us") / 1e3,
                    .save_tail_ms = JsonInt(*prefill, "save_us") / 1e3,
                    .load_ms = JsonInt(*decode, "load_us") / 1e3,
                    .bytes = static_cast<uint64_t>(JsonInt(*decode, "bytes_loaded")),
                    .matched = JsonInt(*decode, "matched_tokens"),
                    .failed_blocks = JsonInt(*decode, "failed_blocks"),
                    .wrong = JsonInt(*decode, "wrong_values")});
    std::cerr << fmt::format(
        "run {}: prefill {:.0f} ms (saves after the last layer {:.0f} ms), decoder load "
        "{:.0f} ms, {} tokens, {} failed blocks, {} wrong values\n",
        r, runs.back().prefill_ms, runs.back().save_tail_ms, runs.back().load_ms,
        runs.back().matched, runs.back().failed_blocks, runs.back().wrong);
  }
  std::filesystem::remove_all(dir);

  std::vector<double> gbps, exposed_ms;
  int64_t wrong = 0;
  for (const Run& run : runs) {
    gbps.push_back(run.load_ms > 0 ? run.bytes / (run.load_ms * 1e6) : 0);
    // The decoder fetches once the prefill has finished: all of its load is exposed.
    exposed_ms.push_back(run.load_ms);
    wrong += run.wrong;
  }
  const double transfer_gbps = Median(gbps);
  const double exposed = Median(exposed_ms);
  const double ttft_ms = modelled_prefill_ms + exposed;
  const std::string ratio =
      perftest.ok() ? fmt::format("{:.2f}", transfer_gbps / *perftest) : "null";
  std::cout << fmt::format(
      "{{\"workload\": {{\"name\": \"pd\", \"prompt_tokens\": {}, \"geometry\": \"{}\", "
      "\"kv_bytes\": {}, \"transports\": \"{}\", \"runs\": {}, \"prefault\": {}, \"cpu\": {}}},\n"
      " \"cost_model\": {{\"modelled\": true, \"gpu\": \"H100 SXM, {} TFLOPS dense BF16 at {:.0f}% "
      "utilisation\", \"flops_per_layer\": {:.3e}, \"layer_ms\": {:.1f}, \"prefill_ms\": "
      "{:.0f}}},\n"
      " \"baseline\": {{\"ucx_perftest_gbps\": {}}},\n"
      " \"transfer_gbps\": {:.2f}, \"transfer_vs_ucx_perftest\": {},\n"
      " \"exposed_transfer_ms\": {:.0f}, \"exposed_share_of_transfer\": 1.0, "
      "\"exposed_share_of_ttft\": {:.3f}, \"modelled_ttft_ms\": {:.0f},\n"
      " \"wrong_values\": {}}}\n",
      o.prompt_tokens, o.geometry, kv_bytes, o.transports, runs.size(), o.prefault,
      JsonString(CpuModel()), o.peak_tflops, o.utilisation * 100, LayerFlops(o.prompt_tokens),
      layer_ms, modelled_prefill_ms,
      perftest.ok() ? fmt::format("{:.2f}", *perftest)
                    : JsonString(std::string(perftest.status().message())),
      transfer_gbps, ratio, exposed, exposed / ttft_ms, ttft_ms, wrong);
  std::cerr << fmt::format(
      "pd: {:.2f} GB/s ({}x ucx_perftest {}), exposed {:.0f} ms = 100% of the transfer, {:.1f}% "
      "of a modelled TTFT of {:.0f} ms\n",
      transfer_gbps, ratio, perftest.ok() ? fmt::format("{:.2f} GB/s", *perftest) : "n/a", exposed,
      100 * exposed / ttft_ms, ttft_ms);
  return wrong > 0 ? 3 : 0;
}

}  // namespace strata::bench
