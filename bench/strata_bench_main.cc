// strata-bench: workload benchmarks through the real daemon and connector, in separate
// processes, with same-run baselines (../shared/BASELINES.md). Prints one JSON document.
//
//   strata-bench mrqa   multi-round QA: N engine processes; each user's prompt is a shared
//                       document plus a growing history of questions and answers. Reports the
//                       hit ratio; connector load / store GB/s as ratios to memcpy measured in
//                       the same run (store: the engines' save calls and commits alone, after
//                       their loads); the connector's socket Lookup round trip for a 32K-token
//                       prompt (p50 / p99); gRPC Lookup throughput as a ratio to a trivial
//                       unary call (Health) in the same run; the daemon's RSS beyond its arena;
//                       with --disk-ttft, the TTFT of a batch whose hits are mostly on disk,
//                       synchronous against asynchronous loads (mrqa/disk_ttft.h).
//   strata-bench pd     a disaggregated prefill through two daemons over UCX: transfer GB/s
//                       against ucx_perftest, and the transfer exposed after a modelled
//                       prefill (pd_command.h).
//   strata-bench pic    position-independent chunks in the daemon's device pool (MEPIC's
//                       workload shape): peak pages in use against a per-request copy in the
//                       same run, and tokens recomputed per request (pic/pic_command.h).
//   strata-bench route  the conversation trace over simulated instances with a host and a disk
//                       tier each, routed round-robin, by longest prefix (Dynamo) and by
//                       Strata's modelled TTFT: hit ratio, modelled TTFT, load imbalance
//                       (route/route_command.h).
//   strata-bench trace  replays a request trace (the production conversation trace, or a
//                       synthetic multi-round-QA or RAG one) against the host tier under every
//                       eviction policy and capacity, next to Belady's bound (trace_command.h).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <thread>

#include "CLI/CLI.hpp"
#include "bench/engine/sim_engine.h"
#include "bench/mrqa/disk_ttft.h"
#include "bench/pd/pd_command.h"
#include "bench/pic/pic_command.h"
#include "bench/route/route_command.h"
#include "bench/support/model_layouts.h"
#include "bench/trace/trace_command.h"
#include "core/fmt_absl.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "proto/convert.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"
#include "tests/support/daemon_process.h"
#include "tests/support/json_fields.h"
#include "tests/support/subprocess.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using test_support::JsonInt;

struct MrqaOptions {
  uint32_t engines = 2;
  uint32_t users = 8;
  uint32_t rounds = 4;
  uint32_t doc_tokens = 4096;
  uint32_t question_tokens = 64;
  uint32_t answer_tokens = 192;
  std::string geometry = "llama8b";
  uint32_t chunk_tokens = 256;
  std::string host_capacity = "6GiB";
  // The daemon's host.prefault: the arena's pages are allocated at start-up, so stores do not
  // fault them in (each engine still maps them on first touch).
  bool prefault = false;
  uint32_t lookup_samples = 2000;
  double grpc_seconds = 2.0;
  // Also measure TTFT with most hits on disk, sync against async loads (bench/mrqa/disk_ttft.h).
  bool disk_ttft = false;
  uint32_t grpc_threads = 2;
};

// GB/s of one-core memcpy over 32 MiB buffers (median of 9 copies, after a warm-up).
double MemcpyGbps() {
  constexpr size_t kBytes = 32u << 20;
  std::vector<char> src(kBytes, 1), dst(kBytes, 0);
  std::vector<double> rates;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), kBytes);
    const auto t1 = Clock::now();
    asm volatile("" : : "r"(dst.data()) : "memory");
    if (i > 0) rates.push_back(kBytes / std::chrono::duration<double>(t1 - t0).count() / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[index];
}

// RSS of `pid` not backed by the shared arena (VmRSS - RssShmem), in bytes.
uint64_t RssBeyondArena(pid_t pid) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  uint64_t rss_kb = 0, shmem_kb = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmRSS:")) rss_kb = std::stoull(line.substr(6));
    if (line.starts_with("RssShmem:")) shmem_kb = std::stoull(line.substr(9));
  }
  return (rss_kb - std::min(rss_kb, shmem_kb)) * 1024;
}

// Closed-loop calls per second of `call` on `threads` threads for `seconds`.
template <typename Call>
double CallsPerSecond(uint32_t threads, double seconds, Call call) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> calls{0}, failures{0};
  std::vector<std::thread> workers;
  const auto start = Clock::now();
  for (uint32_t t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (call()) {
          calls.fetch_add(1, std::memory_order_relaxed);
        } else {
          failures.fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& w : workers) w.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  if (failures > 0) std::cerr << "strata-bench: " << failures << " failed calls\n";
  return calls / elapsed;
}

int RunMrqa(const MrqaOptions& o) {
  const double memcpy_gbps = MemcpyGbps();
  absl::StatusOr<KvLayout> layout = SimLayout(o.geometry, o.chunk_tokens);
  if (!layout.ok()) {
    std::cerr << fmt::format("strata-bench: {}\n", layout.status());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<test_support::DaemonProcess>> daemon =
      test_support::DaemonProcess::Start(
          {.host_capacity = o.host_capacity, .page_bytes = "2MiB", .prefault = o.prefault});
  if (!daemon.ok()) {
    std::cerr << fmt::format("strata-bench: {}\n", daemon.status());
    return 1;
  }
  const std::string socket = (*daemon)->engine_socket();

  // Users are spread over engines; each engine runs its users round by round.
  std::vector<std::unique_ptr<test_support::Subprocess>> engines;
  const uint32_t step = o.question_tokens + o.answer_tokens;
  const auto workload_start = Clock::now();
  for (uint32_t e = 0; e < o.engines; ++e) {
    std::vector<std::string> argv = {STRATA_SIM_ENGINE_PATH,
                                     "--socket",
                                     socket,
                                     "--geometry",
                                     o.geometry,
                                     "--chunk-tokens",
                                     std::to_string(o.chunk_tokens),
                                     "--precompute",
                                     "--engine-id",
                                     fmt::format("engine-{}", e)};
    uint32_t max_tokens = 0;
    for (uint32_t r = 0; r < o.rounds; ++r) {
      for (uint32_t u = e; u < o.users; u += o.engines) {
        const uint32_t history = r * step + o.question_tokens;
        argv.push_back("--prompt");
        argv.push_back(fmt::format("1:{}+{}:{}", o.doc_tokens, 1000 + u, history));
        max_tokens = std::max(max_tokens, o.doc_tokens + history);
      }
    }
    argv.push_back("--num-blocks");
    argv.push_back(std::to_string((max_tokens + 15) / 16 * 2));
    engines.push_back(std::make_unique<test_support::Subprocess>(std::move(argv)));
  }
  uint64_t prompt_tokens = 0, matched_tokens = 0, wrong = 0, bytes_loaded = 0, bytes_saved = 0,
           load_us = 0, save_us = 0, requests = 0, failed_blocks = 0;
  std::vector<double> per_request_load_gbps, per_request_store_gbps;
  for (auto& engine : engines) {
    const std::optional<int> code = engine->Wait(milliseconds(600'000));
    if (code != 0) {
      std::cerr << "strata-bench: an engine failed:\n" << engine->Stderr();
      return 1;
    }
    for (const std::string& line : engine->StdoutLines()) {
      if (!line.starts_with("{\"request\"")) continue;
      ++requests;
      prompt_tokens += JsonInt(line, "prompt_tokens");
      matched_tokens += JsonInt(line, "matched_tokens");
      wrong += JsonInt(line, "wrong_values");
      failed_blocks += JsonInt(line, "failed_blocks");
      // A window counts only when its request moved bytes that way (the windows overlap).
      const int64_t loaded = JsonInt(line, "bytes_loaded"), l_us = JsonInt(line, "load_us");
      const int64_t saved = JsonInt(line, "bytes_saved"), s_us = JsonInt(line, "save_us");
      if (loaded > 0) {
        bytes_loaded += loaded;
        load_us += l_us;
        if (l_us > 0) per_request_load_gbps.push_back(loaded / (l_us * 1e3));
      }
      if (saved > 0) {
        bytes_saved += saved;
        save_us += s_us;
        if (s_us > 0) per_request_store_gbps.push_back(saved / (s_us * 1e3));
      }
    }
  }
  const double workload_seconds =
      std::chrono::duration<double>(Clock::now() - workload_start).count();
  const uint64_t daemon_rss = RssBeyondArena((*daemon)->pid());

  // Lookup round trip for a 32K-token prompt, cached in full. Keys and the daemon's work do not
  // depend on the geometry, so the prompt is stored with the small one (64 MiB, not 4 GiB).
  absl::StatusOr<KvLayout> small = SimLayout("small", o.chunk_tokens);
  {
    test_support::Subprocess store({STRATA_SIM_ENGINE_PATH, "--socket", socket, "--geometry",
                                    "small", "--prompt", "77:32768", "--num-blocks", "2100",
                                    "--precompute"});
    if (store.Wait(milliseconds(120'000)) != 0) {
      std::cerr << "strata-bench: storing the 32K prompt failed:\n" << store.Stderr();
      return 1;
    }
  }
  connector::ConnectorOptions lookup_options;
  lookup_options.socket_path = socket;
  lookup_options.layout = *small;
  lookup_options.engine_id = "bench-lookup";
  lookup_options.lookup_budget = milliseconds(1000);
  auto scheduler = connector::SchedulerConnector::Create(lookup_options);
  if (!scheduler.ok()) {
    std::cerr << fmt::format("strata-bench: {}\n", scheduler.status());
    return 1;
  }
  const std::vector<uint32_t> long_prompt = PromptTokens({{77, 32768}});
  std::vector<double> lookup_us;
  int64_t lookup_hit = 0;
  for (uint32_t i = 0; i < o.lookup_samples + 100; ++i) {
    const auto t0 = Clock::now();
    const connector::MatchResult m =
        (*scheduler)
            ->GetNumNewMatchedTokens({.request_id = "lookup", .prompt_tokens = long_prompt}, 0);
    const auto t1 = Clock::now();
    lookup_hit = m.num_tokens;
    if (i >= 100) lookup_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }

  // gRPC: Lookup (by the 128 keys, and by the 32K tokens) against a trivial unary call.
  v1::LookupRequest by_keys, by_tokens;
  const KeyHasher hasher = *KeyHasher::Create(*small, {});
  for (const ChunkKey& key : hasher.PrefixKeys(long_prompt, {})) *by_keys.add_keys() = ToProto(key);
  *by_tokens.mutable_layout() = ToProto(*small);
  // As a router sending a long prompt should: in tokens_fixed32 (the varint field costs about
  // twice as much; bench/micro/control_bench compares the two).
  by_tokens.mutable_tokens_fixed32()->Assign(long_prompt.begin(), long_prompt.end());
  v1::StrataControl::Stub& stub = (*daemon)->control();
  auto deadline = [] { return std::chrono::system_clock::now() + std::chrono::seconds(5); };
  // The three kinds of call take turns in short windows, so machine noise hits them alike.
  auto health = [&] {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    v1::HealthResponse response;
    return stub.Health(&context, v1::HealthRequest(), &response).ok();
  };
  auto lookup_keys = [&] {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    v1::LookupResponse response;
    return stub.Lookup(&context, by_keys, &response).ok() && response.matched_chunks() == 128;
  };
  auto lookup_tokens = [&] {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    v1::LookupResponse response;
    return stub.Lookup(&context, by_tokens, &response).ok() && response.matched_tokens() == 32768;
  };
  constexpr int kRounds = 10;
  const double window = o.grpc_seconds / kRounds;
  double health_qps = 0, lookup_keys_qps = 0, lookup_tokens_qps = 0;
  for (int round = 0; round < kRounds; ++round) {
    health_qps += CallsPerSecond(o.grpc_threads, window, health) / kRounds;
    lookup_keys_qps += CallsPerSecond(o.grpc_threads, window, lookup_keys) / kRounds;
    lookup_tokens_qps += CallsPerSecond(o.grpc_threads, window, lookup_tokens) / kRounds;
  }
  const test_support::ExitInfo exit = (*daemon)->Stop();

  const double load_gbps = load_us == 0 ? 0 : bytes_loaded / (load_us * 1e3);
  const double store_gbps = save_us == 0 ? 0 : bytes_saved / (save_us * 1e3);
  // TTFT with most hits on disk, synchronous against asynchronous loads (its own daemons).
  std::string disk_ttft = "null";
  if (o.disk_ttft) {
    absl::StatusOr<std::string> measured =
        MeasureDiskTtft({.geometry = o.geometry, .chunk_tokens = o.chunk_tokens});
    if (!measured.ok()) {
      std::cerr << fmt::format("strata-bench: disk TTFT: {}\n", measured.status());
      return 1;
    }
    disk_ttft = *measured;
    std::cerr << "disk TTFT: " << disk_ttft << "\n";
  }
  std::cout << fmt::format(
      "{{\n"
      "  \"workload\": {{\"name\": \"mrqa\", \"engines\": {}, \"users\": {}, \"rounds\": {}, "
      "\"prefault\": {}, "
      "\"doc_tokens\": {}, \"question_tokens\": {}, \"answer_tokens\": {}, \"geometry\": \"{}\", "
      "\"bytes_per_token\": {}, \"chunk_tokens\": {}, \"requests\": {}, \"seconds\": {:.2f}}},\n"
      "  \"hit_ratio\": {:.4f},\n"
      "  \"prompt_tokens\": {}, \"matched_tokens\": {}, \"failed_blocks\": {}, \"wrong_values\": "
      "{},\n"
      "  \"memcpy_gbps\": {:.2f},\n"
      "  \"load\": {{\"bytes\": {}, \"gbps\": {:.2f}, \"ratio_to_memcpy\": {:.3f}, "
      "\"p50_request_gbps\": {:.2f}}},\n"
      "  \"store\": {{\"bytes\": {}, \"gbps\": {:.2f}, \"ratio_to_memcpy\": {:.3f}, "
      "\"p50_request_gbps\": {:.2f}, \"includes\": \"SaveKvLayer for every layer + WaitForSave "
      "(copies and commit; PrepareStore is in the load window)\"}},\n"
      "  \"socket_lookup_32k\": {{\"hit_tokens\": {}, \"p50_us\": {:.1f}, \"p99_us\": {:.1f}, "
      "\"samples\": {}, \"includes\": \"key hashing of 32768 tokens + one round trip\"}},\n"
      "  \"grpc\": {{\"threads\": {}, \"trivial_unary_qps\": {:.0f}, \"lookup_128_keys_qps\": "
      "{:.0f}, "
      "\"lookup_keys_ratio\": {:.3f}, \"lookup_32k_tokens_qps\": {:.0f}, \"lookup_tokens_ratio\": "
      "{:.3f}}},\n"
      "  \"daemon\": {{\"rss_beyond_arena_mib\": {:.1f}, \"exit_code\": {}, \"stop_ms\": {}}},\n"
      "  \"disk_ttft\": {}\n"
      "}}\n",
      o.engines, o.users, o.rounds, o.prefault, o.doc_tokens, o.question_tokens, o.answer_tokens,
      o.geometry, layout->bytes_per_token(), o.chunk_tokens, requests, workload_seconds,
      prompt_tokens == 0 ? 0.0 : static_cast<double>(matched_tokens) / prompt_tokens, prompt_tokens,
      matched_tokens, failed_blocks, wrong, memcpy_gbps, bytes_loaded, load_gbps,
      load_gbps / memcpy_gbps, Percentile(per_request_load_gbps, 0.5), bytes_saved, store_gbps,
      store_gbps / memcpy_gbps, Percentile(per_request_store_gbps, 0.5), lookup_hit,
      Percentile(lookup_us, 0.5), Percentile(lookup_us, 0.99), lookup_us.size(), o.grpc_threads,
      health_qps, lookup_keys_qps, lookup_keys_qps / health_qps, lookup_tokens_qps,
      lookup_tokens_qps / health_qps, daemon_rss / 1048576.0, exit.code, exit.stop_time.count(),
      disk_ttft);
  return wrong == 0 ? 0 : 3;
}

}  // namespace
}  // namespace strata::bench

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("strata-bench"));
  strata::bench::MrqaOptions o;
  CLI::App app{"strata-bench: workload benchmarks through the real daemon and connector"};
  app.require_subcommand(1);
  CLI::App* mrqa = app.add_subcommand("mrqa", "multi-round QA over N engine processes");
  mrqa->add_option("--engines", o.engines)->capture_default_str();
  mrqa->add_option("--users", o.users)->capture_default_str();
  mrqa->add_option("--rounds", o.rounds)->capture_default_str();
  mrqa->add_option("--doc-tokens", o.doc_tokens)->capture_default_str();
  mrqa->add_option("--question-tokens", o.question_tokens)->capture_default_str();
  mrqa->add_option("--answer-tokens", o.answer_tokens)->capture_default_str();
  mrqa->add_option("--geometry", o.geometry, "llama8b or small")->capture_default_str();
  mrqa->add_option("--chunk-tokens", o.chunk_tokens)->capture_default_str();
  mrqa->add_option("--host-capacity", o.host_capacity)->capture_default_str();
  mrqa->add_flag("--prefault", o.prefault, "the daemon allocates its arena at start-up");
  mrqa->add_option("--lookup-samples", o.lookup_samples)->capture_default_str();
  mrqa->add_option("--grpc-seconds", o.grpc_seconds)->capture_default_str();
  mrqa->add_option("--grpc-threads", o.grpc_threads)->capture_default_str();
  mrqa->add_flag("--disk-ttft", o.disk_ttft,
                 "also: TTFT of a batch whose hits are mostly on disk, sync against async loads");
  strata::bench::TraceCommandOptions t{.trace_file = STRATA_DEFAULT_TRACE};
  CLI::App* trace = app.add_subcommand("trace", "eviction policies replayed on a request trace");
  trace->add_option("--workload", t.workload, "conversation, mrqa or rag")->capture_default_str();
  trace->add_option("--trace-file", t.trace_file, "the conversation trace (Mooncake JSONL)")
      ->capture_default_str();
  trace->add_option("--capacity", t.capacities, "fractions of unique blocks (5%) or sizes (64MiB)")
      ->delimiter(',')
      ->capture_default_str();
  trace->add_option("--policy", t.policies, "policies to replay (default: all)")->delimiter(',');
  trace->add_option("--threads", t.threads)->capture_default_str();
  strata::bench::PdOptions p;
  CLI::App* pd = app.add_subcommand("pd", "a disaggregated prefill through two daemons");
  pd->add_option("--prompt-tokens", p.prompt_tokens)->capture_default_str();
  pd->add_option("--geometry", p.geometry, "llama8b or small")->capture_default_str();
  pd->add_option("--chunk-tokens", p.chunk_tokens)->capture_default_str();
  pd->add_option("--transports", p.transports, "UCX_TLS, e.g. tcp or shm")->capture_default_str();
  pd->add_option("--net-devices", p.net_devices)->capture_default_str();
  pd->add_option("--peak-tflops", p.peak_tflops)->capture_default_str();
  pd->add_option("--utilisation", p.utilisation)->capture_default_str();
  pd->add_option("--runs", p.runs)->capture_default_str();
  pd->add_option("--mode", p.mode, "pull, stream or both")
      ->check(CLI::IsMember({"pull", "stream", "both"}))
      ->capture_default_str();
  pd->add_option("--prefault", p.prefault, "the daemons allocate their arenas at start-up")
      ->capture_default_str();
  strata::bench::RouteCommandOptions r{.trace_file = STRATA_DEFAULT_TRACE};
  CLI::App* route = app.add_subcommand("route", "routers compared on the conversation trace");
  route->add_option("--trace-file", r.trace_file, "the conversation trace (Mooncake JSONL)")
      ->capture_default_str();
  route->add_option("--instances", r.instances)->capture_default_str();
  route->add_option("--host-capacity", r.host_capacity, "per instance")->capture_default_str();
  route->add_option("--disk-capacity", r.disk_capacity, "per instance")->capture_default_str();
  route->add_option("--load-scale", r.load_scale, "arrival rate as a multiple of the trace's")
      ->capture_default_str();
  route->add_option("--geometry", r.geometry, "llama8b or small")->capture_default_str();
  route->add_option("--prefill-us-per-token", r.prefill_us_per_token)->capture_default_str();
  route->add_option("--host-gbps", r.host_gbps, "host tier into the engine")->capture_default_str();
  route->add_option("--disk-gbps", r.disk_gbps, "disk tier into the engine")->capture_default_str();
  strata::bench::PicBenchOptions c;
  CLI::App* pic = app.add_subcommand("pic", "position-independent chunks in the device pool");
  pic->add_option("--geometry", c.geometry, "llama8b or small")->capture_default_str();
  pic->add_option("--chunk-tokens", c.chunk_tokens)->capture_default_str();
  pic->add_option("--block-tokens", c.block_tokens)->capture_default_str();
  pic->add_option("--chunks", c.chunks_per_prompt, "chunks per prompt, one run each")
      ->delimiter(',')
      ->capture_default_str();
  pic->add_option("--corpus", c.corpus_passages)->capture_default_str();
  pic->add_option("--passage-min-tokens", c.passage_min_tokens)->capture_default_str();
  pic->add_option("--passage-max-tokens", c.passage_max_tokens)->capture_default_str();
  pic->add_option("--zipf", c.zipf_s)->capture_default_str();
  pic->add_option("--engines", c.engines)->capture_default_str();
  pic->add_option("--in-flight", c.in_flight, "open requests per engine")->capture_default_str();
  pic->add_option("--requests", c.requests, "per engine and chunk count")->capture_default_str();
  pic->add_option("--pool", c.pool_bytes, "device_pool.bytes_per_layout")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (pic->parsed()) return strata::bench::RunPicCommand(c);
  if (route->parsed()) return strata::bench::RunRouteCommand(r);
  if (trace->parsed()) return strata::bench::RunTraceCommand(t);
  if (pd->parsed()) return strata::bench::RunPdCommand(p);
  return strata::bench::RunMrqa(o);
}
