#include "bench/mrqa/disk_ttft.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <numeric>
#include <vector>

#include "bench/support/model_layouts.h"
#include "core/fmt_absl.h"
#include "fmt/format.h"
#include "tests/support/daemon_process.h"
#include "tests/support/json_fields.h"
#include "tests/support/subprocess.h"

namespace strata::bench {
namespace {

using std::chrono::milliseconds;
using test_support::JsonInt;

struct ModeResult {
  std::vector<double> disk_ms, host_ms;
  int64_t wrong = 0;
  int64_t failed_blocks = 0;
};

// Runs sim_engine to its end with `args`; its request lines.
absl::StatusOr<std::vector<std::string>> RunEngine(const std::string& socket,
                                                   const std::vector<std::string>& common,
                                                   std::vector<std::string> args) {
  std::vector<std::string> argv = {STRATA_SIM_ENGINE_PATH, "--socket", socket};
  argv.insert(argv.end(), common.begin(), common.end());
  argv.insert(argv.end(), args.begin(), args.end());
  test_support::Subprocess engine(std::move(argv));
  if (engine.Wait(milliseconds(600'000)) != 0) {
    return absl::InternalError(fmt::format("sim_engine failed: {}", engine.Stderr()));
  }
  std::vector<std::string> lines;
  for (const std::string& line : engine.StdoutLines()) {
    if (line.starts_with("{\"request\"")) lines.push_back(line);
  }
  return lines;
}

std::vector<std::string> Prompts(uint32_t first_seed, uint32_t count, uint32_t tokens) {
  std::vector<std::string> args;
  for (uint32_t i = 0; i < count; ++i) {
    args.push_back("--prompt");
    args.push_back(fmt::format("{}:{}", first_seed + i, tokens));
  }
  return args;
}

absl::StatusOr<ModeResult> RunMode(const DiskTtftOptions& o, uint64_t prompt_bytes, bool async) {
  const std::filesystem::path disk = std::filesystem::temp_directory_path() /
                                     fmt::format("strata-bench-ttft-{}-{}", ::getpid(), async);
  std::filesystem::remove_all(disk);
  // Room for the batch and a little more: priming pushes the disk prompts out.
  const uint64_t batch_bytes = 2 * o.prompts_per_kind * prompt_bytes;
  const uint64_t chunk_bytes = prompt_bytes / (o.prompt_tokens / o.chunk_tokens);
  absl::StatusOr<std::unique_ptr<test_support::DaemonProcess>> daemon =
      test_support::DaemonProcess::Start(
          {.host_capacity = fmt::format(
               "{}MiB", (batch_bytes * 5 / 4 + chunk_bytes) / chunk_bytes * (chunk_bytes >> 20)),
           .page_bytes = fmt::format("{}KiB", chunk_bytes >> 10),
           .extra_args = {"--policy", "lru"},
           .extra_toml = fmt::format("[disk]\ndirectory = \"{}\"\ncapacity_bytes = \"{}MiB\"\n",
                                     disk.string(), (8 * batch_bytes >> 20) + 64)});
  if (!daemon.ok()) return daemon.status();
  const std::string socket = (*daemon)->engine_socket();
  const uint32_t batch_prompts = 2 * o.prompts_per_kind;
  const std::vector<std::string> common = {
      "--geometry",     o.geometry,
      "--chunk-tokens", std::to_string(o.chunk_tokens),
      "--num-blocks",   std::to_string((o.prompt_tokens / 16 + 1) * (batch_prompts + 1)),
      "--precompute"};
  // Disk prompts (seeds 100..), fillers that push them to disk, then host prompts (200..).
  for (const auto& [seed, count] : {std::pair<uint32_t, uint32_t>{100, o.prompts_per_kind},
                                    {300, 2 * batch_prompts},
                                    {200, o.prompts_per_kind}}) {
    absl::StatusOr<std::vector<std::string>> primed =
        RunEngine(socket, common, Prompts(seed, count, o.prompt_tokens));
    if (!primed.ok()) return primed.status();
  }
  std::vector<std::string> args = {"--batch"};
  if (async) args.push_back("--async-loads");
  for (uint32_t i = 0; i < o.prompts_per_kind; ++i) {
    for (uint32_t seed : {100 + i, 200 + i}) {
      args.push_back("--prompt");
      args.push_back(fmt::format("{}:{}", seed, o.prompt_tokens));
    }
  }
  absl::StatusOr<std::vector<std::string>> served = RunEngine(socket, common, args);
  (*daemon)->Stop();
  std::filesystem::remove_all(disk);
  if (!served.ok()) return served.status();
  if (served->size() != batch_prompts) return absl::InternalError("the batch lost requests");
  ModeResult result;
  for (size_t i = 0; i < served->size(); ++i) {
    const std::string& line = (*served)[i];
    (i % 2 == 0 ? result.disk_ms : result.host_ms).push_back(JsonInt(line, "ttft_us") / 1e3);
    result.wrong += JsonInt(line, "wrong_values");
    result.failed_blocks += JsonInt(line, "failed_blocks");
  }
  return result;
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}

std::string ModeJson(const ModeResult& r) {
  std::vector<double> all = r.disk_ms;
  all.insert(all.end(), r.host_ms.begin(), r.host_ms.end());
  std::sort(all.begin(), all.end());
  return fmt::format(
      "{{\"ttft_mean_ms\": {:.1f}, \"ttft_p50_ms\": {:.1f}, \"ttft_max_ms\": {:.1f}, "
      "\"disk_hits_mean_ms\": {:.1f}, \"host_hits_mean_ms\": {:.1f}, \"failed_blocks\": {}, "
      "\"wrong_values\": {}}}",
      Mean(all), all[all.size() / 2], all.back(), Mean(r.disk_ms), Mean(r.host_ms), r.failed_blocks,
      r.wrong);
}

}  // namespace

absl::StatusOr<std::string> MeasureDiskTtft(const DiskTtftOptions& o) {
  absl::StatusOr<KvLayout> layout = SimLayout(o.geometry, o.chunk_tokens);
  if (!layout.ok()) return layout.status();
  if (o.prompt_tokens % o.chunk_tokens != 0 || o.prompts_per_kind == 0) {
    return absl::InvalidArgumentError("prompts must be whole chunks, at least one of each kind");
  }
  const uint64_t prompt_bytes = uint64_t{o.prompt_tokens} * layout->bytes_per_token();
  absl::StatusOr<ModeResult> sync = RunMode(o, prompt_bytes, false);
  if (!sync.ok()) return sync.status();
  absl::StatusOr<ModeResult> async = RunMode(o, prompt_bytes, true);
  if (!async.ok()) return async.status();
  return fmt::format(
      "{{\"geometry\": \"{}\", \"prompt_tokens\": {}, \"disk_hits\": {}, \"host_hits\": {}, "
      "\"sync\": {}, \"async\": {}, \"async_vs_sync_mean_ttft\": {:.2f}}}",
      o.geometry, o.prompt_tokens, o.prompts_per_kind, o.prompts_per_kind, ModeJson(*sync),
      ModeJson(*async),
      Mean(async->disk_ms) + Mean(async->host_ms) > 0
          ? (Mean(async->disk_ms) + Mean(async->host_ms)) /
                (Mean(sync->disk_ms) + Mean(sync->host_ms))
          : 0.0);
}

}  // namespace strata::bench
