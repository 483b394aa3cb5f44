#include "bench/pd/pd_command.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "bench/support/model_layouts.h"
#include "bench/support/remote_baselines.h"
#include "core/clock.h"
#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
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

// How often the bench asks B's daemon for its host tier's chunks while a stream lands: the
// times it reports are this coarse (against tails of seconds here), and each ask costs both
// processes a gRPC round trip, CPU taken from the transfer it times.
constexpr milliseconds kWatchPeriod(10);

struct Run {
  double prefill_ms = 0;    // the prefill engine's step: modelled compute, then its saves
  double save_tail_ms = 0;  // of which the saves after the last layer
  double load_ms = 0;       // the decoder's load (pull: the fetch from A)
  uint64_t bytes = 0;
  int64_t matched = 0;
  int64_t failed_blocks = 0;
  int64_t wrong = 0;
  // Stream: the prefill's last layer computed, its saves done (every layer in A's arena), and
  // the decoder's daemon holding every chunk (wall clock, microseconds since the epoch; 0 when
  // it never did).
  int64_t last_layer_unix_us = 0;
  int64_t saved_unix_us = 0;
  int64_t arrived_unix_us = 0;

  // Of the time exposed after the last layer: the prefill engine's saves still catching up, and
  // the transfer's own tail once every byte was in A's arena.
  double saves_lag_ms() const {
    return std::max<int64_t>(0, std::min(saved_unix_us, arrived_unix_us) - last_layer_unix_us) /
           1e3;
  }
  // Every block loaded: a pull past the decoder's deadline fails its blocks (they are
  // recomputed), so it measures no transfer.
  bool loaded_whole() const { return failed_blocks == 0 && bytes > 0; }
  double tail_after_saves_ms() const {
    return std::max<int64_t>(0, arrived_unix_us - std::max(saved_unix_us, last_layer_unix_us)) /
           1e3;
  }
};

// The chunks the daemon's host tier holds; 0 when Stats fails.
uint64_t HostChunks(test_support::DaemonProcess& daemon) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::StatsResponse stats;
  if (!daemon.control().Stats(&context, v1::StatsRequest(), &stats).ok()) return 0;
  for (const v1::TierStats& tier : stats.tiers()) {
    if (tier.tier() == v1::TIER_HOST) return tier.chunks();
  }
  return 0;
}

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
                       dial.empty() ? "" : fmt::format("\"{}\"", dial)),
       // Gigabytes of arena allocated up front take this box a while.
       .start_timeout = std::chrono::seconds(o.prefault ? 300 : 10)});
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

// Waits (10 s at most) until the daemon on `socket` admits the peer `node`: a lookup naming it
// is answered.
bool AwaitAdmission(const std::string& socket, const KvLayout& layout, const char* node) {
  test_support::RawEngineClient probe(socket);
  if (!probe.Handshake(layout).ok()) return false;
  const std::vector<uint32_t> tokens(layout.chunk_tokens, 1);
  const std::vector<ChunkKey> keys = KeyHasher::Create(layout, {})->PrefixKeys(tokens, {});
  for (int attempt = 0; attempt < 400; ++attempt) {
    v1::EngineRequest lookup = test_support::LookupRequest(keys);
    lookup.mutable_lookup()->set_source_node(node);
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
  if (!AwaitAdmission((*decode_daemon)->engine_socket(), *layout, kPrefillNode) ||
      !AwaitAdmission((*prefill_daemon)->engine_socket(), *layout, kDecodeNode)) {
    std::cerr << "strata-bench pd: the daemons never admitted each other:\n"
              << (*prefill_daemon)->Log() << (*decode_daemon)->Log();
    return 1;
  }

  const std::vector<std::string> common = {
      "--geometry",     o.geometry,
      "--chunk-tokens", std::to_string(o.chunk_tokens),
      "--num-blocks",   std::to_string(o.prompt_tokens / 16 + 16),
      "--precompute",   "--io-timeout-ms",
      "120000"};
  const uint64_t num_chunks = (o.prompt_tokens + o.chunk_tokens - 1) / o.chunk_tokens;
  std::vector<bool> modes;  // streamed or not, in the order each run tries them
  if (o.mode != "stream") modes.push_back(false);
  if (o.mode != "pull") modes.push_back(true);
  std::vector<Run> runs[2];  // [streamed]
  for (uint32_t r = 0; r < o.runs; ++r) {
    for (const bool streamed : modes) {
      for (auto* daemon : {&*prefill_daemon, &*decode_daemon}) {
        if (absl::Status cleared = ClearAll(**daemon); !cleared.ok()) {
          std::cerr << fmt::format("strata-bench pd: {}\n", cleared);
          return 1;
        }
      }
      const std::string prompt = fmt::format("{}:{}", 500 + 2 * r + streamed, o.prompt_tokens);
      std::vector<std::string> prefill_args = {
          "--socket",         (*prefill_daemon)->engine_socket(),
          "--prompt",         prompt,
          "--kv-transfer",    "send",
          "--layer-delay-us", std::to_string(static_cast<int64_t>(layer_ms * 1e3))};
      if (streamed) prefill_args.insert(prefill_args.end(), {"--decode-node", kDecodeNode});
      prefill_args.insert(prefill_args.end(), common.begin(), common.end());
      // Streamed: watch B's host tier fill up while A prefills (every kWatchPeriod), to time
      // when the last chunk lands there; the stream's tail lands within pd_deadline_ms (30 s)
      // of the prefill or not at all.
      std::atomic<bool> stop_watching{false};
      std::atomic<int64_t> arrived_unix_us{0};
      std::thread watcher;
      if (streamed) {
        watcher = std::thread([&] {
          while (!stop_watching.load()) {
            if (HostChunks(**decode_daemon) >= num_chunks) {
              arrived_unix_us = UnixMicros();
              return;
            }
            std::this_thread::sleep_for(kWatchPeriod);
          }
        });
      }
      absl::StatusOr<std::string> prefill = RunEngine(prefill_args);
      for (int i = 0; i < 30'000 && streamed && arrived_unix_us.load() == 0; ++i) {
        std::this_thread::sleep_for(milliseconds(1));
      }
      stop_watching = true;
      if (watcher.joinable()) watcher.join();
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
      Run run{.prefill_ms = JsonInt(*prefill, "step_us") / 1e3,
              .save_tail_ms = JsonInt(*prefill, "save_us") / 1e3,
              .load_ms = JsonInt(*decode, "load_us") / 1e3,
              .bytes = static_cast<uint64_t>(JsonInt(*decode, "bytes_loaded")),
              .matched = JsonInt(*decode, "matched_tokens"),
              .failed_blocks = JsonInt(*decode, "failed_blocks"),
              .wrong = JsonInt(*decode, "wrong_values"),
              .last_layer_unix_us = JsonInt(*prefill, "last_layer_unix_us"),
              .saved_unix_us = JsonInt(*prefill, "saved_unix_us"),
              .arrived_unix_us = arrived_unix_us};
      std::cerr << fmt::format(
          "run {} ({}): prefill {:.0f} ms (saves {:.0f} ms), {}decoder load {:.0f} ms, {} "
          "tokens, {} failed blocks, {} wrong values\n",
          r, streamed ? "stream" : "pull", run.prefill_ms, run.save_tail_ms,
          !streamed ? ""
          : run.arrived_unix_us == 0
              ? std::string("the stream never landed whole on B, ")
              : fmt::format("last chunk on B {:.0f} ms after the last layer ({:.0f} ms of "
                            "saves catching up, then {:.0f} ms), ",
                            (run.arrived_unix_us - run.last_layer_unix_us) / 1e3,
                            run.saves_lag_ms(), run.tail_after_saves_ms()),
          run.load_ms, run.matched, run.failed_blocks, run.wrong);
      runs[streamed].push_back(run);
    }
  }
  std::filesystem::remove_all(dir);

  int64_t wrong = 0;
  for (const auto& mode_runs : runs) {
    for (const Run& run : mode_runs) wrong += run.wrong;
  }
  const std::string perftest_json = perftest.ok()
                                        ? fmt::format("{:.2f}", *perftest)
                                        : JsonString(std::string(perftest.status().message()));
  std::string pull_json = "null";
  if (!runs[0].empty()) {
    // The decoder fetches once the prefill has finished: all of its load is exposed. A pull
    // that failed its deadline moved no KV (its blocks were recomputed): it is counted apart,
    // not as 0 GB/s, and the transfer's figures are the medians of the pulls that loaded whole.
    std::vector<double> gbps, exposed_ms, failed_ms;
    for (const Run& run : runs[0]) {
      if (!run.loaded_whole()) {
        failed_ms.push_back(run.load_ms);
        continue;
      }
      gbps.push_back(run.load_ms > 0 ? run.bytes / (run.load_ms * 1e6) : 0);
      exposed_ms.push_back(run.load_ms);
    }
    const std::string failed_json =
        fmt::format("\"failed_pulls\": {}, \"failed_pull_ms\": [{:.0f}]", failed_ms.size(),
                    fmt::join(failed_ms, ", "));
    if (gbps.empty()) {
      pull_json = fmt::format("{{\"transfer_gbps\": null, {}}}", failed_json);
      std::cerr << fmt::format("pd pull: none of {} pulls loaded whole (took {:.0f} ms)\n",
                               failed_ms.size(), fmt::join(failed_ms, ", "));
    } else {
      const double transfer_gbps = Median(gbps);
      const double exposed = Median(exposed_ms);
      const double ttft_ms = modelled_prefill_ms + exposed;
      const std::string ratio =
          perftest.ok() ? fmt::format("{:.2f}", transfer_gbps / *perftest) : "null";
      pull_json = fmt::format(
          "{{\"transfer_gbps\": {:.2f}, \"transfer_vs_ucx_perftest\": {}, "
          "\"exposed_transfer_ms\": {:.0f}, \"exposed_share_of_transfer\": 1.0, "
          "\"exposed_share_of_ttft\": {:.3f}, \"modelled_ttft_ms\": {:.0f}, {}}}",
          transfer_gbps, ratio, exposed, exposed / ttft_ms, ttft_ms, failed_json);
      std::cerr << fmt::format(
          "pd pull: {:.2f} GB/s ({}x ucx_perftest {}), exposed {:.0f} ms = 100% of the "
          "transfer, {:.1f}% of a modelled TTFT of {:.0f} ms (medians of {} pulls that loaded "
          "whole; {} failed their deadline, recomputed)\n",
          transfer_gbps, ratio, perftest.ok() ? fmt::format("{:.2f} GB/s", *perftest) : "n/a",
          exposed, 100 * exposed / ttft_ms, ttft_ms, gbps.size(), failed_ms.size());
    }
  }
  std::string stream_json = "null";
  if (!runs[1].empty()) {
    // The transfer runs from the end of the first layer (its bytes may move from then on) to
    // the last chunk committed on B; what of it comes after the last layer is exposed.
    std::vector<double> exposed_ms, window_ms, load_ms, saves_lag_ms, after_saves_ms;
    for (const Run& run : runs[1]) {
      if (run.arrived_unix_us == 0) {
        std::cerr << "strata-bench pd: a streamed prompt never arrived whole on B\n"
                  << (*prefill_daemon)->Log() << (*decode_daemon)->Log();
        return 1;
      }
      const double exposed = std::max<double>(0, run.arrived_unix_us - run.last_layer_unix_us);
      exposed_ms.push_back(exposed / 1e3);
      window_ms.push_back(exposed / 1e3 + layer_ms * (layout->num_layers - 1));
      load_ms.push_back(run.load_ms);
      saves_lag_ms.push_back(run.saves_lag_ms());
      after_saves_ms.push_back(run.tail_after_saves_ms());
    }
    const double exposed = Median(exposed_ms);
    const double window = Median(window_ms);
    const double ttft_ms = modelled_prefill_ms + exposed;
    stream_json = fmt::format(
        "{{\"transfer_gbps\": {:.2f}, \"exposed_transfer_ms\": {:.1f}, "
        "\"exposed_share_of_transfer\": {:.4f}, \"exposed_share_of_ttft\": {:.4f}, "
        "\"modelled_ttft_ms\": {:.0f}, \"decoder_local_load_ms\": {:.0f}, "
        "\"exposed_saves_lag_ms\": {:.1f}, \"exposed_after_saves_ms\": {:.1f}}}",
        kv_bytes / (window * 1e6), exposed, exposed / window, exposed / ttft_ms, ttft_ms,
        Median(load_ms), Median(saves_lag_ms), Median(after_saves_ms));
    std::cerr << fmt::format(
        "pd stream: the last chunk on B {:.1f} ms after the prefill's last layer = {:.2f}% of the "
        "transfer ({:.0f} ms from the first layer's end, {:.2f} GB/s paced by the prefill), "
        "{:.2f}% of a modelled TTFT of {:.0f} ms (medians: {:.1f} ms of it the prefill's saves "
        "into A's arena catching up, {:.1f} ms the transfer after them); the decoder's load from "
        "B's host tier {:.0f} ms\n",
        exposed, 100 * exposed / window, window, kv_bytes / (window * 1e6), 100 * exposed / ttft_ms,
        ttft_ms, Median(saves_lag_ms), Median(after_saves_ms), Median(load_ms));
  }
  std::cout << fmt::format(
      "{{\"workload\": {{\"name\": \"pd\", \"prompt_tokens\": {}, \"geometry\": \"{}\", "
      "\"kv_bytes\": {}, \"transports\": \"{}\", \"runs\": {}, \"prefault\": {}, \"cpu\": {}}},\n"
      " \"cost_model\": {{\"modelled\": true, \"gpu\": \"H100 SXM, {} TFLOPS dense BF16 at {:.0f}% "
      "utilisation\", \"flops_per_layer\": {:.3e}, \"layer_ms\": {:.1f}, \"prefill_ms\": "
      "{:.0f}}},\n"
      " \"baseline\": {{\"ucx_perftest_gbps\": {}}},\n"
      " \"pull\": {},\n \"stream\": {},\n"
      " \"wrong_values\": {}}}\n",
      o.prompt_tokens, o.geometry, kv_bytes, o.transports, o.runs, o.prefault,
      JsonString(CpuModel()), o.peak_tflops, o.utilisation * 100, LayerFlops(o.prompt_tokens),
      layer_ms, modelled_prefill_ms, perftest_json, pull_json, stream_json, wrong);
  return wrong > 0 ? 3 : 0;
}

}  // namespace strata::bench
