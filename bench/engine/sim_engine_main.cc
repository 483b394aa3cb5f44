// sim_engine: one simulated engine process (bench/engine/sim_engine.h) running a list of
// prompts against a daemon. Prints one JSON line per request, then {"summary":...}.
// Exit status: 0; 3 when any loaded value was wrong; 2 for bad flags.
#include <chrono>
#include <iostream>

#include "CLI/CLI.hpp"
#include "bench/engine/sim_engine.h"
#include "bench/support/model_layouts.h"
#include "core/fmt_absl.h"
#include "fmt/format.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  using namespace strata::bench;
  SimEngineOptions options;
  std::string geometry = "small";
  uint32_t chunk_tokens = 256, repeat = 1;
  std::vector<std::string> prompt_specs;
  CLI::App app{"sim_engine: a simulated engine process driving the Strata connector"};
  app.add_option("--socket", options.socket_path, "daemon engine socket")->required();
  app.add_option("--engine-id", options.engine_id);
  app.add_option("--geometry", geometry, "small or llama8b");
  app.add_option("--chunk-tokens", chunk_tokens);
  app.add_option("--block-size", options.block_size);
  app.add_option("--num-blocks", options.num_blocks);
  app.add_flag("--separate-kv", options.separate_kv, "separate K and V tensors");
  app.add_option("--prompt", prompt_specs, "SEED:LEN[+SEED:LEN...], repeatable")->required();
  app.add_option("--repeat", repeat, "run the prompt list this many times");
  double seconds = 0;
  app.add_option("--seconds", seconds,
                 "stop repeating the prompt list once this long has passed (0: no limit)");
  app.add_option("--layer-delay-us", options.layer_delay_us);
  app.add_flag("--precompute", options.precompute);
  app.add_option("--lookup-budget-ms", options.lookup_budget_ms);
  app.add_option("--io-timeout-ms", options.io_timeout_ms);
  app.add_flag("--store-partial", options.store_partial);
  app.add_flag("--async-loads", options.async_loads,
               "load hits below the daemon's host tier between steps");
  std::string kv_transfer = "none";
  app.add_option("--kv-transfer", kv_transfer,
                 "disaggregated prefill: send (prefill for a decoder) or receive (load what "
                 "--source-node prefilled)")
      ->check(CLI::IsMember({"none", "send", "receive"}));
  app.add_option("--source-node", options.source_node, "the prefiller daemon's node id");
  app.add_option("--decode-node", options.decode_node,
                 "send: the decoder daemon's node id, to stream the KV to as it is computed");
  app.add_option("--tenant", options.tenant_salt, "every request's tenant salt (cache_salt)");
  bool batch = false;
  app.add_flag("--batch", batch,
               "serve each repetition of the prompt list as one batch arriving at once "
               "(ttft_us per request)");
  CLI11_PARSE(app, argc, argv);
  options.kv_transfer = kv_transfer == "send"      ? strata::connector::KvTransfer::kSend
                        : kv_transfer == "receive" ? strata::connector::KvTransfer::kReceive
                                                   : strata::connector::KvTransfer::kNone;
  spdlog::set_default_logger(spdlog::stderr_color_mt("sim_engine"));

  std::vector<Prompt> prompts;
  for (const std::string& spec : prompt_specs) {
    absl::StatusOr<Prompt> prompt = ParsePrompt(spec);
    if (!prompt.ok()) {
      std::cerr << fmt::format("sim_engine: {}\n", prompt.status());
      return 2;
    }
    prompts.push_back(*prompt);
  }
  absl::StatusOr<strata::KvLayout> layout = SimLayout(geometry, chunk_tokens);
  if (!layout.ok()) {
    std::cerr << fmt::format("sim_engine: {}\n", layout.status());
    return 2;
  }
  options.layout = *layout;
  absl::StatusOr<std::unique_ptr<SimEngine>> engine = SimEngine::Create(options);
  if (!engine.ok()) {
    std::cerr << fmt::format("sim_engine: {}\n", engine.status());
    return 2;
  }
  uint64_t wrong = 0, tokens = 0, matched = 0, failed = 0;
  const auto start = std::chrono::steady_clock::now();
  auto time_left = [&] {
    return seconds <= 0 ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
               seconds;
  };
  for (uint32_t r = 0; r < repeat && time_left(); ++r) {
    std::vector<RequestResult> results;
    if (batch) {
      absl::StatusOr<std::vector<RequestResult>> served = (*engine)->RunBatch(prompts);
      if (!served.ok()) {
        std::cerr << fmt::format("sim_engine: {}\n", served.status());
        return 2;
      }
      results = *std::move(served);
    } else {
      for (const Prompt& prompt : prompts) results.push_back((*engine)->Run(prompt));
    }
    for (const RequestResult& result : results) {
      std::cout << result.ToJson() << std::endl;
      wrong += result.wrong_values;
      tokens += result.prompt_tokens;
      matched += result.matched_tokens;
      failed += result.failed_blocks;
    }
  }
  const strata::connector::WorkerStats stats = (*engine)->worker_stats();
  const strata::connector::SchedulerStats scheduler = (*engine)->scheduler_stats();
  // Both roles' sessions (the worker's two when it loads asynchronously).
  const strata::connector::SessionStats& ws = stats.session;
  const strata::connector::SessionStats& ss = scheduler.session;
  std::cout
      << fmt::format(
             "{{\"summary\":{{\"prompt_tokens\":{},\"matched_tokens\":{},\"failed_blocks\":{},"
             "\"wrong_values\":{},\"chunks_loaded\":{},\"chunks_saved\":{},"
             "\"chunks_already_present\":{},\"chunks_failed\":{},\"lookups\":{},"
             "\"lookup_failures\":{},\"connects\":{},\"disconnects\":{},\"timeouts\":{},"
             "\"late_replies\":{}}}}}",
             tokens, matched, failed, wrong, stats.chunks_loaded, stats.chunks_saved,
             stats.chunks_already_present, stats.chunks_failed, scheduler.lookups,
             scheduler.lookup_failures, ws.connects + ss.connects, ws.disconnects + ss.disconnects,
             ws.timeouts + ss.timeouts, ws.late_replies + ss.late_replies)
      << std::endl;
  return wrong == 0 ? 0 : 3;
}
