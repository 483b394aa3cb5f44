#include "tests/soak/soak_driver.h"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <utility>

#include "bench/engine/sim_engine.h"
#include "bench/support/model_layouts.h"
#include "core/fmt_absl.h"
#include "fmt/format.h"
#include "grpcpp/client_context.h"
#include "proto/convert.h"
#include "tests/soak/loop_filesystem.h"
#include "tests/soak/process_usage.h"
#include "tests/support/daemon_process.h"
#include "tests/support/json_fields.h"
#include "tests/support/sim_engine_process.h"
#include "tests/support/subprocess.h"

namespace strata::soak {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
using test_support::DaemonProcess;
using test_support::Subprocess;

constexpr uint32_t kChunkTokens = 256;
// The tenants engines run as ("" is a request without a salt).
const std::vector<std::string> kTenants = {"", "alpha", "beta"};
// An engine that runs longer than this hangs.
constexpr seconds kEngineTimeLimit{120};
// How long a dead engine's session, leases and reservations may take to go.
constexpr seconds kQuiescentWait{10};

std::unique_ptr<grpc::ClientContext> Deadline(seconds timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + timeout);
  return context;
}

// The prompts engines draw from: families sharing a prefix, with suffixes, so engines hit each
// other's chunks, and the driver can ask the daemon for them by their tokens.
std::vector<std::string> PromptPool() {
  std::vector<std::string> pool;
  for (uint32_t family = 1; family <= 12; ++family) {
    const uint32_t prefix = kChunkTokens * (2 + family % 7);
    pool.push_back(fmt::format("{}:{}", family, prefix));
    for (uint32_t k = 0; k < 3; ++k) {
      pool.push_back(fmt::format("{}:{}+{}:{}", family, prefix, 100 + family * 10 + k,
                                 kChunkTokens * (1 + k) + 37));
    }
  }
  return pool;
}

struct Engine {
  std::unique_ptr<Subprocess> process;
  Clock::time_point started;
  std::optional<Clock::time_point> kill_at;
};

// What a daemon looked like at its first moment without engines.
struct Baseline {
  ProcessUsage usage;
  // The RSS level later checks compare with: the largest of the checks up to the first one
  // past kRssWarmUp of the daemon's life (set from then on).
  uint64_t rss_level = 0;
  bool rss_level_set = false;
};

// A daemon's RSS grows while its caches (RocksDB's memtable, up to 8 MiB), queues and
// allocator warm up.
constexpr seconds kRssWarmUp{90};

class Soak {
 public:
  explicit Soak(const SoakOptions& options)
      : options_(options), rng_(options.seed), pool_(PromptPool()) {}

  SoakReport Run();

 private:
  void Violation(std::string what);
  void Setup();
  bool StartDaemon();
  void KillDaemon();
  // Adds the current daemon's time past the warm-up to the report's RSS coverage (at its end).
  void CountRssCoverage();

  void StartEngine();
  void ReapEngines(bool kill_all);
  // Counts what an engine did; `exit_code` is nullopt for an engine the driver killed.
  void Collect(Engine& engine, std::optional<int> exit_code);

  void CheckQuiescent();
  bool WaitQuiescent(std::string* state);
  void ClearTenant();
  void ToggleDiskFill();
  void SuddenKill();
  // Every chunk the disk tier lists, as serialized keys, sorted; nullopt (a violation recorded)
  // when the listing fails.
  std::optional<std::vector<std::string>> ListDiskChunks();
  // SIGSTOPs every engine, waits for the disk tier to hold still and lists it; nullopt when it
  // has no disk tier or did not settle (the kill then goes unchecked). ThawEngines resumes them.
  std::optional<std::vector<std::string>> FreezeAndListDisk();
  void ThawEngines();
  // Records the chunks of `written` missing from `found` as lost (a violation).
  void CountLostDiskChunks(const std::vector<std::string>& written,
                           const std::vector<std::string>& found, const std::string& killed_log);
  void CheckedKill();
  // matched_chunks of every pool prompt for every tenant, by Lookup; nullopt on an RPC error.
  std::optional<std::vector<uint64_t>> ProbePool();

  template <typename T>
  T Uniform(T low, T high) {
    return std::uniform_int_distribution<T>(low, high)(rng_);
  }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  Clock::time_point After(seconds low, seconds high) {
    return Clock::now() + milliseconds(Uniform<int64_t>(low.count() * 1000, high.count() * 1000));
  }

  SoakOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::string> pool_;
  KvLayout layout_;
  SoakReport report_;
  std::filesystem::path work_dir_;
  std::unique_ptr<LoopFilesystem> filesystem_;
  std::string disk_dir_;
  std::string socket_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::optional<Baseline> baseline_;
  Clock::time_point daemon_started_;
  std::vector<Engine> engines_;
  uint64_t next_engine_ = 0;
  uint32_t next_flood_seed_ = 5000;
};

void Soak::Violation(std::string what) {
  fmt::print(stderr, "soak: VIOLATION: {}\n", what);
  if (daemon_ != nullptr) {
    const std::filesystem::path log =
        work_dir_ / fmt::format("stratad-{}.log", report_.daemon_starts);
    std::ofstream(log) << daemon_->Log();  // each daemon's log kept once, as it is now
    what += fmt::format(" (daemon log: {})", log.string());
  }
  report_.violations.push_back(std::move(what));
}

void Soak::Setup() {
  if (options_.work_dir.empty()) {
    char tmpl[] = "/tmp/strata-soak-XXXXXX";
    work_dir_ = ::mkdtemp(tmpl) != nullptr ? tmpl : "/tmp/strata-soak";
  } else {
    work_dir_ = options_.work_dir;
  }
  std::filesystem::create_directories(work_dir_);
  socket_ = (work_dir_ / "engine.sock").string();
  absl::StatusOr<std::unique_ptr<LoopFilesystem>> filesystem =
      LoopFilesystem::Mount((work_dir_ / "disk.img").string(), (work_dir_ / "disk").string(),
                            options_.disk_filesystem_bytes);
  if (filesystem.ok()) {
    filesystem_ = *std::move(filesystem);
    disk_dir_ = filesystem_->dir() + "/tier";
  } else {
    report_.disk_fill_skipped =
        fmt::format("no filesystem of its own to fill: {}", filesystem.status());
    disk_dir_ = (work_dir_ / "disk-tier").string();
  }
  layout_ = *bench::SimLayout("small", kChunkTokens);
}

bool Soak::StartDaemon() {
  const auto start = Clock::now();
  absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
      {.host_capacity = options_.host_capacity,
       .page_bytes = "64KiB",
       .lease_ms = 10'000,
       .prefault = true,
       .engine_socket = socket_,
       .extra_toml = fmt::format("[disk]\ndirectory = \"{}\"\ncapacity_bytes = \"{}\"\n"
                                 "segment_bytes = \"4MiB\"\n",
                                 disk_dir_, options_.disk_capacity)});
  if (!daemon.ok()) {
    Violation(fmt::format("the daemon did not start: {}", daemon.status()));
    return false;
  }
  daemon_ = *std::move(daemon);
  baseline_.reset();
  daemon_started_ = Clock::now();
  ++report_.daemon_starts;
  report_.max_restart_ms =
      std::max<uint64_t>(report_.max_restart_ms,
                         std::chrono::duration_cast<milliseconds>(Clock::now() - start).count());
  return true;
}

void Soak::CountRssCoverage() {
  const Clock::time_point warm_from = daemon_started_ + kRssWarmUp;
  const Clock::time_point now = Clock::now();
  if (now > warm_from)
    report_.rss_covered_s += std::chrono::duration<double>(now - warm_from).count();
}

void Soak::KillDaemon() {
  if (daemon_ == nullptr) return;
  CountRssCoverage();
  daemon_->Kill();
  daemon_.reset();  // its directory (socket, config, log) goes; the disk tier stays
}

void Soak::StartEngine() {
  const uint64_t id = next_engine_++;
  std::vector<std::string> args = {"--engine-id",     fmt::format("soak-{}", id),
                                   "--chunk-tokens",  std::to_string(kChunkTokens),
                                   "--io-timeout-ms", "2000"};
  const std::string& tenant = kTenants[Uniform<size_t>(0, kTenants.size() - 1)];
  if (!tenant.empty()) args.insert(args.end(), {"--tenant", tenant});
  if (Chance(0.1)) {
    // A flood: new prompts only, pushing older chunks down to the disk and off it.
    for (int i = 0; i < 4; ++i)
      args.insert(args.end(), {"--prompt", fmt::format("{}:4096", next_flood_seed_++)});
  } else {
    const int prompts = Uniform(2, 6);
    for (int i = 0; i < prompts; ++i) {
      args.insert(args.end(), {"--prompt", pool_[Uniform<size_t>(0, pool_.size() - 1)]});
    }
    args.insert(args.end(), {"--repeat", std::to_string(Uniform(1, 3))});
  }
  if (Chance(0.5)) args.push_back("--async-loads");
  if (Chance(0.5))
    args.insert(args.end(), {"--layer-delay-us", std::to_string(Uniform(100, 3000))});
  Engine engine{.process = test_support::StartSimEngine(socket_, std::move(args)),
                .started = Clock::now()};
  if (Chance(options_.engine_kill_probability)) {
    engine.kill_at =
        Clock::now() + milliseconds(Uniform<int64_t>(50, options_.max_engine_kill_delay.count()));
  }
  engines_.push_back(std::move(engine));
  ++report_.engines_started;
}

void Soak::Collect(Engine& engine, std::optional<int> exit_code) {
  for (const std::string& line : test_support::SimEngineJsonLines(*engine.process)) {
    const auto field = [&](const char* name) {
      return static_cast<uint64_t>(std::max<int64_t>(0, test_support::JsonInt(line, name)));
    };
    if (line.find("\"summary\"") != std::string::npos) {
      report_.sessions_dropped += field("disconnects");
      report_.calls_past_deadline += field("timeouts");
      report_.late_replies += field("late_replies");
      report_.lookups += field("lookups");
      report_.lookups_past_budget += field("lookup_failures");
      continue;
    }
    ++report_.requests;
    const uint64_t matched = field("matched_tokens");
    report_.hit_tokens += matched;
    if (matched > 0) ++report_.requests_with_hits;
    if (field("bytes_saved") > 0) ++report_.requests_saved;
    report_.bytes_loaded += field("bytes_loaded");
    report_.failed_blocks += field("failed_blocks");
    const uint64_t wrong = field("wrong_values");
    if (wrong > 0) Violation(fmt::format("an engine loaded {} wrong values: {}", wrong, line));
    report_.wrong_values += wrong;
  }
  if (!exit_code) {
    ++report_.engine_kills;
    return;
  }
  ++report_.engines_exited;
  if (*exit_code != 0) {
    std::string err = engine.process->Stderr();
    if (err.size() > 2000) err = err.substr(err.size() - 2000);
    Violation(fmt::format("an engine exited with {}: {}", *exit_code, err));
  }
}

void Soak::ReapEngines(bool kill_all) {
  const auto now = Clock::now();
  for (Engine& engine : engines_) {
    const std::optional<int> exit_code = engine.process->Poll();
    if (exit_code) {
      Collect(engine, exit_code);
      engine.process.reset();
      continue;
    }
    const bool hung = now - engine.started > kEngineTimeLimit;
    if (kill_all || hung || (engine.kill_at && now >= *engine.kill_at)) {
      if (hung) Violation(fmt::format("an engine hung: {}", engine.process->Stderr()));
      engine.process->Kill(SIGKILL);  // and reaped
      Collect(engine, std::nullopt);
      engine.process.reset();
    }
  }
  std::erase_if(engines_, [](const Engine& engine) { return engine.process == nullptr; });
}

bool Soak::WaitQuiescent(std::string* state) {
  const auto deadline = Clock::now() + kQuiescentWait;
  while (true) {
    v1::StatsResponse stats;
    const grpc::Status status = daemon_->control().Stats(Deadline(seconds(5)).get(), {}, &stats);
    if (status.ok()) {
      uint64_t leases = 0, reserved = 0;
      for (const v1::TierStats& tier : stats.tiers()) {
        if (tier.tier() != v1::TIER_HOST) continue;
        leases = tier.leases();
        reserved = tier.reserved_bytes();
      }
      *state = fmt::format("sessions {}, leases {}, reserved bytes {}", stats.sessions(), leases,
                           reserved);
      if (stats.sessions() == 0 && leases == 0 && reserved == 0) return true;
    } else {
      *state = fmt::format("Stats failed: {}", status.error_message());
    }
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(100));
  }
}

void Soak::CheckQuiescent() {
  ReapEngines(/*kill_all=*/true);
  ++report_.mass_kills;
  std::string state;
  if (!WaitQuiescent(&state)) {
    Violation(fmt::format("{} s after every engine died the daemon still has {}",
                          kQuiescentWait.count(), state));
    return;
  }
  // Evictions the engines caused may still be on their way to the disk, in staging buffers:
  // the RSS is read once it holds still (within 1% over 250 ms, for 5 s at most).
  absl::StatusOr<ProcessUsage> usage = ReadProcessUsage(daemon_->pid(), disk_dir_);
  for (int i = 0; i < 20 && usage.ok(); ++i) {
    std::this_thread::sleep_for(milliseconds(250));
    absl::StatusOr<ProcessUsage> later = ReadProcessUsage(daemon_->pid(), disk_dir_);
    const bool still = later.ok() && later->rss_bytes * 100 <= usage->rss_bytes * 101 &&
                       later->rss_bytes * 100 >= usage->rss_bytes * 99;
    usage = std::move(later);
    if (still) break;
  }
  if (!usage.ok()) {
    Violation(fmt::format("cannot read the daemon's usage: {}", usage.status()));
    return;
  }
  ++report_.quiescent_checks;
  report_.rss_quiescent_max = std::max(report_.rss_quiescent_max, usage->rss_bytes);
  const bool warm = Clock::now() - daemon_started_ >= kRssWarmUp;
  const bool first = !baseline_;
  if (first) baseline_ = Baseline{.usage = *usage};
  double rss_growth = 0;
  if (!baseline_->rss_level_set) {
    baseline_->rss_level = std::max(baseline_->rss_level, usage->rss_bytes);
    baseline_->rss_level_set = warm;
  } else if (warm) {
    // A daemon younger than the warm-up has not grown into its caches yet: not compared.
    ++report_.rss_checks;
    rss_growth = static_cast<double>(usage->rss_bytes) / baseline_->rss_level - 1;
  }
  if (first) return;
  const ProcessUsage& base = baseline_->usage;
  const int64_t fd_growth = static_cast<int64_t>(usage->fds) - static_cast<int64_t>(base.fds);
  const int64_t map_growth =
      static_cast<int64_t>(usage->mappings) - static_cast<int64_t>(base.mappings);
  report_.fd_max_growth = std::max(report_.fd_max_growth, fd_growth);
  report_.mapping_max_growth = std::max(report_.mapping_max_growth, map_growth);
  report_.rss_max_growth = std::max(report_.rss_max_growth, rss_growth);
  if (fd_growth > 0) {
    Violation(fmt::format("the daemon's descriptors grew by {} with no engine: {} (then: {})",
                          fd_growth, DescribeFds(*usage), DescribeFds(base)));
  }
  if (map_growth > 0) {
    const std::filesystem::path then =
        work_dir_ / fmt::format("maps-{}-then", report_.violations.size());
    const std::filesystem::path now =
        work_dir_ / fmt::format("maps-{}-now", report_.violations.size());
    std::ofstream(then) << base.maps;
    std::ofstream(now) << usage->maps;
    Violation(
        fmt::format("the daemon's mappings grew by {} with no engine ({} -> {}; threads {} -> {}; "
                    "the maps: {} {})",
                    map_growth, base.mappings, usage->mappings, base.threads, usage->threads,
                    then.string(), now.string()));
  }
  if (rss_growth > options_.rss_growth_limit) {
    Violation(fmt::format("the daemon's RSS grew by {:.1f}% with no engine ({} -> {} bytes)",
                          rss_growth * 100, baseline_->rss_level, usage->rss_bytes));
  }
}

void Soak::ClearTenant() {
  v1::ClearRequest request;
  request.set_tenant(kTenants[Uniform<size_t>(0, kTenants.size() - 1)]);
  v1::ClearResponse response;
  const grpc::Status status =
      daemon_->control().Clear(Deadline(seconds(10)).get(), request, &response);
  if (!status.ok()) {
    Violation(fmt::format("Clear(tenant \"{}\") failed: {} {}", request.tenant(),
                          static_cast<int>(status.error_code()), status.error_message()));
  }
  ++report_.tenant_clears;
}

void Soak::ToggleDiskFill() {
  if (filesystem_ == nullptr) return;
  if (filesystem_->filled()) {
    filesystem_->Release();
    return;
  }
  const absl::Status filled = filesystem_->Fill(/*leave_bytes=*/0);
  if (!filled.ok()) Violation(fmt::format("cannot fill the disk: {}", filled));
  ++report_.disk_fills;
}

std::optional<std::vector<uint64_t>> Soak::ProbePool() {
  std::vector<uint64_t> chunks;
  for (const std::string& tenant : kTenants) {
    for (const std::string& spec : pool_) {
      v1::LookupRequest request;
      *request.mutable_layout() = ToProto(layout_);
      for (uint32_t token : bench::PromptTokens(*bench::ParsePrompt(spec)))
        request.add_tokens(token);
      request.set_tenant_salt(tenant);
      v1::LookupResponse response;
      const grpc::Status status =
          daemon_->control().Lookup(Deadline(seconds(10)).get(), request, &response);
      if (!status.ok()) {
        Violation(fmt::format("Lookup failed: {}", status.error_message()));
        return std::nullopt;
      }
      chunks.push_back(response.matched_chunks());
    }
  }
  return chunks;
}

std::optional<std::vector<std::string>> Soak::ListDiskChunks() {
  std::vector<std::string> keys;
  v1::ListChunksRequest request;
  request.set_tier(v1::TIER_DISK);
  request.set_page_size(1000);
  for (int page = 0; page < 10'000; ++page) {
    v1::ListChunksResponse response;
    const grpc::Status status =
        daemon_->control().ListChunks(Deadline(seconds(10)).get(), request, &response);
    if (!status.ok()) {
      Violation(fmt::format("ListChunks(disk) failed: {}", status.error_message()));
      return std::nullopt;
    }
    for (const v1::ChunkEntry& entry : response.chunks()) {
      keys.push_back(entry.key().SerializeAsString());
    }
    if (response.next_page_token().empty()) {
      std::sort(keys.begin(), keys.end());
      return keys;
    }
    request.set_page_token(response.next_page_token());
  }
  Violation("ListChunks(disk) did not end within 10,000 pages");
  return std::nullopt;
}

std::optional<std::vector<std::string>> Soak::FreezeAndListDisk() {
  for (Engine& engine : engines_) ::kill(engine.process->pid(), SIGSTOP);
  // Demotions already on their way land (and evict) first: the listing is taken once the disk
  // tier's chunks, bytes and evictions held still for a second (10 s at most).
  auto disk = [&]() -> std::optional<std::tuple<uint64_t, uint64_t, uint64_t>> {
    v1::StatsResponse stats;
    if (!daemon_->control().Stats(Deadline(seconds(10)).get(), {}, &stats).ok()) return {};
    for (const v1::TierStats& tier : stats.tiers()) {
      if (tier.tier() == v1::TIER_DISK) {
        return std::tuple(tier.chunks(), tier.stored_bytes(), tier.evictions());
      }
    }
    return {};
  };
  auto last = disk();
  int still = 0;
  for (int i = 0; i < 40 && last && still < 4; ++i) {
    std::this_thread::sleep_for(milliseconds(250));
    auto now = disk();
    still = now == last ? still + 1 : 0;
    last = now;
  }
  if (!last || still < 4) return std::nullopt;  // no disk tier, or it did not settle: unchecked
  std::optional<std::vector<std::string>> listed = ListDiskChunks();
  if (listed && disk() != last) return std::nullopt;  // it moved while listed: unchecked
  return listed;
}

void Soak::ThawEngines() {
  for (Engine& engine : engines_) ::kill(engine.process->pid(), SIGCONT);
}

void Soak::CountLostDiskChunks(const std::vector<std::string>& written,
                               const std::vector<std::string>& found,
                               const std::string& killed_log) {
  std::vector<std::string> lost;
  std::set_difference(written.begin(), written.end(), found.begin(), found.end(),
                      std::back_inserter(lost));
  report_.acked_chunks_checked += written.size();
  report_.acked_chunks_lost += lost.size();
  if (lost.empty()) return;
  const std::filesystem::path killed_log_path =
      work_dir_ / fmt::format("stratad-{}-killed.log", report_.daemon_starts - 1);
  std::ofstream(killed_log_path) << killed_log;
  v1::ChunkKey first;
  first.ParseFromString(lost.front());
  Violation(fmt::format(
      "{} of {} chunks the disk tier listed before a SIGKILL under load are gone after the "
      "restart (the first: {}; the killed daemon's log: {})",
      lost.size(), written.size(), first.ShortDebugString(), killed_log_path.string()));
}

void Soak::SuddenKill() {
  // Every other one with the engines frozen, and what the disk tier had written checked.
  const bool frozen = report_.daemon_kills_sudden % 2 == 1;
  std::optional<std::vector<std::string>> written;
  if (frozen) written = FreezeAndListDisk();
  const std::string killed_log = daemon_->Log();
  KillDaemon();
  ++report_.daemon_kills_sudden;
  if (frozen) {
    if (written) {
      ++report_.daemon_kills_frozen;
      if (StartDaemon()) {
        std::optional<std::vector<std::string>> found = ListDiskChunks();
        if (found) CountLostDiskChunks(*written, *found, killed_log);
      }
    }
    ThawEngines();
    if (daemon_ != nullptr) return;
  }
  // A supervisor restarts it after a moment; the engines reconnect by themselves.
  std::this_thread::sleep_for(milliseconds(Uniform(0, 1500)));
  StartDaemon();
}

void Soak::CheckedKill() {
  CheckQuiescent();
  if (filesystem_ != nullptr) filesystem_->Release();
  v1::DrainResponse drained;
  const grpc::Status status = daemon_->control().Drain(Deadline(seconds(60)).get(), {}, &drained);
  if (!status.ok()) Violation(fmt::format("Drain failed: {}", status.error_message()));
  // Only disk copies stay: what Lookup finds now is what the disk tier acknowledged.
  v1::ClearRequest clear;
  clear.set_all(true);
  clear.set_tier(v1::TIER_HOST);
  v1::ClearResponse cleared;
  const grpc::Status clear_status =
      status.ok() ? daemon_->control().Clear(Deadline(seconds(10)).get(), clear, &cleared) : status;
  if (status.ok() && !clear_status.ok()) {
    Violation(fmt::format("Clear(host) failed: {}", clear_status.error_message()));
  }
  // Without them, what Lookup finds is not only the disk's: nothing to check after the kill.
  const std::optional<std::vector<uint64_t>> before =
      clear_status.ok() ? ProbePool() : std::nullopt;
  const std::string killed_log = daemon_->Log();
  KillDaemon();
  ++report_.daemon_kills_checked;
  if (!StartDaemon() || !before) return;
  const std::optional<std::vector<uint64_t>> after = ProbePool();
  if (!after) return;
  const std::filesystem::path killed_log_path =
      work_dir_ / fmt::format("stratad-{}-killed.log", report_.daemon_starts - 1);
  for (size_t i = 0; i < before->size(); ++i) {
    report_.acked_chunks_checked += (*before)[i];
    if ((*after)[i] < (*before)[i]) {
      const uint64_t lost = (*before)[i] - (*after)[i];
      report_.acked_chunks_lost += lost;
      if (!std::filesystem::exists(killed_log_path)) std::ofstream(killed_log_path) << killed_log;
      Violation(fmt::format(
          "{} acknowledged disk chunks of prompt {} (tenant \"{}\") are gone after a "
          "restart (the killed daemon's log: {})",
          lost, pool_[i % pool_.size()], kTenants[i / pool_.size()], killed_log_path.string()));
    }
  }
}

SoakReport Soak::Run() {
  Setup();
  const auto start = Clock::now();
  const auto deadline = start + options_.duration;
  const auto steady_until = start + std::chrono::duration_cast<milliseconds>(
                                        options_.duration * options_.steady_fraction);
  if (!StartDaemon()) return report_;
  // The first daemon lives through the steady part; then churn phases and long lives alternate.
  auto next_daemon_kill = steady_until;
  uint32_t churn_left = options_.churn_kills;
  auto next_mass_kill = After(options_.min_mass_kill_gap, options_.max_mass_kill_gap);
  auto next_clear = After(options_.tenant_clear_gap / 2, options_.tenant_clear_gap * 3 / 2);
  auto next_fill = After(options_.disk_fill_gap / 2, options_.disk_fill_gap * 3 / 2);
  bool sudden_next = true;
  while (Clock::now() < deadline) {
    ReapEngines(/*kill_all=*/false);
    while (engines_.size() < options_.engines) StartEngine();
    const auto now = Clock::now();
    if (now >= next_clear) {
      ClearTenant();
      next_clear = After(options_.tenant_clear_gap / 2, options_.tenant_clear_gap * 3 / 2);
    }
    if (now >= next_fill) {
      ToggleDiskFill();
      next_fill = filesystem_ != nullptr && filesystem_->filled()
                      ? Clock::now() + options_.disk_fill_time
                      : After(options_.disk_fill_gap / 2, options_.disk_fill_gap * 3 / 2);
    }
    if (now >= next_mass_kill) {
      CheckQuiescent();
      next_mass_kill = After(options_.min_mass_kill_gap, options_.max_mass_kill_gap);
    }
    if (now >= next_daemon_kill) {
      // Alternating keeps both kinds frequent whatever the run's length.
      if (sudden_next) {
        SuddenKill();
      } else {
        CheckedKill();
      }
      sudden_next = !sudden_next;
      if (daemon_ == nullptr && !StartDaemon()) break;
      if (churn_left > 0) {
        --churn_left;
        next_daemon_kill = After(options_.min_daemon_life, options_.max_daemon_life);
      } else {
        churn_left = options_.churn_kills;
        next_daemon_kill = After(options_.min_long_daemon_life, options_.max_long_daemon_life);
      }
      next_mass_kill = After(options_.min_mass_kill_gap, options_.max_mass_kill_gap);
    }
    if (daemon_ != nullptr) {
      const absl::StatusOr<uint64_t> rss = ReadRssBytes(daemon_->pid());
      if (rss.ok()) report_.rss_high_water = std::max(report_.rss_high_water, *rss);
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  if (daemon_ != nullptr) {
    CheckQuiescent();
    CountRssCoverage();
    const test_support::ExitInfo exit = daemon_->Stop(seconds(30));
    if (!exit.exited || exit.code != 0) {
      Violation(fmt::format("the daemon did not stop cleanly on SIGTERM ({} {})",
                            exit.exited ? "exit" : "signal", exit.code));
    }
    daemon_.reset();
  }
  ReapEngines(/*kill_all=*/true);
  filesystem_.reset();
  report_.elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  return report_;
}

}  // namespace

std::string SoakReport::ToText() const {
  std::string text = fmt::format(
      "soak: {:.0f} s\n"
      "  daemon: {} starts, {} SIGKILLs under load ({} with the engines frozen and the disk "
      "checked), {} SIGKILLs after a drain, longest restart {} ms\n"
      "  engines: {} started, {} SIGKILLed ({} mass kills), {} ran to completion\n"
      "  requests: {} ({} with hits, {} hit tokens, {} stored), {} bytes loaded, {} blocks "
      "recomputed\n"
      "  wrong values: {}\n"
      "  sessions: {} dropped, {} calls past their deadline, {} late replies discarded; "
      "lookups {}, {} past their budget\n"
      "  acknowledged disk chunks checked after restarts: {}, lost: {}\n"
      "  faults: {} tenant clears, {} disk fills{}\n"
      "  leaks ({} checks with no engine): descriptors +{} at most, mappings +{} at most\n"
      "  daemon RSS: high-water {:.1f} MiB (demotions' staging included), with no engine at most "
      "{:.1f} MiB; {} checks past a {} s warm-up: +{:.1f}% at most; a warm daemon was under the "
      "bound for {:.0f} s ({:.0f}% of the run)\n",
      elapsed_s, daemon_starts, daemon_kills_sudden, daemon_kills_frozen, daemon_kills_checked,
      max_restart_ms, engines_started, engine_kills, mass_kills, engines_exited, requests,
      requests_with_hits, hit_tokens, requests_saved, bytes_loaded, failed_blocks, wrong_values,
      sessions_dropped, calls_past_deadline, late_replies, lookups, lookups_past_budget,
      acked_chunks_checked, acked_chunks_lost, tenant_clears, disk_fills,
      disk_fill_skipped.empty() ? "" : fmt::format(" (skipped: {})", disk_fill_skipped),
      quiescent_checks, fd_max_growth, mapping_max_growth, rss_high_water / 1048576.0,
      rss_quiescent_max / 1048576.0, rss_checks, kRssWarmUp.count(), rss_max_growth * 100,
      rss_covered_s, elapsed_s > 0 ? rss_covered_s / elapsed_s * 100 : 0.0);
  text += fmt::format("  violations: {}\n", violations.size());
  for (const std::string& v : violations) text += fmt::format("    - {}\n", v);
  return text;
}

SoakReport RunSoak(const SoakOptions& options) { return Soak(options).Run(); }

}  // namespace strata::soak
