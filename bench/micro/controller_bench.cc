// controller_bench: the cluster chunk index (controller/index) at cluster scale, in one process.
//
// Feed, once per holder mix (--holders, default "1,2"): --instances instances each store
// --chunks-per-instance chunks, as whole chains of --chain-length chunks. Every instance holds one
// shared chain (a system prompt all of them served); every other chain is held by exactly H
// instances of the mix (1: each prefix on one replica; 2: on two). A holder keeps the head of a
// chain in host memory and its tail on disk (a random split). The instances' events arrive
// interleaved, one chain's events (one Ingest call) at a time; digests are random, as real keys'.
//
// Prints, per mix, each figure with its target, and one JSON line with all of them:
//   build ingest rate, one core (time inside Ingest; shards grow meanwhile)    >= 8M events/s
//   steady ingest rate, one core: an instance stores a new chain and removes   >= 8M events/s
//     one it stored 64 chains before, at a constant index size
//   bytes per indexed (chunk, instance) pair: the process's VmRSS growth over  <= 64 B
//     the build, divided by the live pairs (the index's own estimate next to it)
//   the floor: 128 random prefetched cache-line reads over memory of the index's size, on huge
//     pages, measured in this run (BASELINES.md): what one cache miss per chunk costs here
//   lookup of a --chain-length chain an instance holds whole, p50 and p99: alone, and while
//   another thread runs the steady ingest at full speed (its rate reported)  p99 <= 5 us
//     (both also as ratios to the floor's; the shared chain, held by every instance, is
//     reported on its own line, without target)
//   dropping the instance with the most chunks                                <= 8 ms
//     then checks that lookups of its chains no longer report it, and times the sweep pass that
//     reclaims its entries (no target).
// With --latencies=FILE, also writes the distributions of the floor and of both lookup runs to
// FILE: lines "holders series quantile us" (series floor, alone, ingest; quantiles 0, 0.001,
// ..., 1), for plotting (scripts/plots.sh).
// Exit status 0 when the run completed (targets missed included), 1 when a check failed.
//
// Usage: controller_bench [--instances=N] [--chunks-per-instance=N] [--chain-length=N]
//                         [--lookups=N] [--seed=N] [--holders=1,2] [--latencies=FILE]
// Defaults: 100 instances x 1000000 chunks (1-2 GiB of index per mix); a quick run:
//   controller_bench --instances=10 --chunks-per-instance=100000
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/support/flags.h"
#include "controller/index/cluster_index.h"
#include "fmt/format.h"

namespace strata::controller {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  uint64_t instances = 100;
  uint64_t chunks_per_instance = 1000000;
  uint64_t chain_length = 128;
  uint64_t lookups = 200000;
  uint64_t seed = 1;
  std::vector<uint64_t> holders = {1, 2};
  std::string latencies_path;  // empty: no distributions written
};

constexpr double kLookupTargetUs = 5;
constexpr double kIngestTarget = 8e6;
constexpr double kBytesTarget = 64;
constexpr double kDropTargetMs = 8;
// Steady ingest: an instance removes the chain it stored this many chains before.
constexpr uint64_t kChurnWindow = 64;
// Chains the steady ingest cycles through (their events made before it starts).
constexpr uint64_t kChurnChains = 4096;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Chunk `i` of chain `chain`: a 16-byte digest as random as xxh3's.
ChunkKey Key(uint64_t chain, uint64_t i) {
  std::array<uint64_t, 2> words = {Mix(chain << 24 | i), Mix(~(chain << 24 | i))};
  std::array<uint8_t, 16> digest;
  std::memcpy(digest.data(), words.data(), digest.size());
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, 0x11a3a8b, digest);
}

std::vector<ChunkKey> ChainKeys(uint64_t chain, uint64_t length) {
  std::vector<ChunkKey> keys;
  keys.reserve(length);
  for (uint64_t i = 0; i < length; ++i) keys.push_back(Key(chain, i));
  return keys;
}

std::vector<ChunkEvent> ChainEvents(uint64_t chain, uint64_t length, ChunkEventKind kind,
                                    uint64_t host_chunks) {
  std::vector<ChunkEvent> events(length);
  for (uint64_t c = 0; c < length; ++c) {
    events[c] = {
        .kind = kind, .tier = c < host_chunks ? Tier::kHost : Tier::kDisk, .key = Key(chain, c)};
  }
  return events;
}

std::string InstanceId(uint64_t i) { return fmt::format("node-{:03}/gpu-0", i); }

// A "<field>: <n> kB" line of a /proc file, in bytes; 0 when absent.
uint64_t ProcKbField(const char* path, std::string_view field) {
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    if (line.starts_with(field)) return std::stoull(line.substr(field.size())) * 1024;
  }
  return 0;
}

uint64_t VmRssBytes() { return ProcKbField("/proc/self/status", "VmRSS:"); }

const char* Verdict(bool met) { return met ? "met" : "MISSED"; }

int Fail(const std::string& message) {
  std::fprintf(stderr, "controller_bench: %s\n", message.c_str());
  return 1;
}

constexpr int kQuantiles = 1000;  // the distribution's steps (--latencies)

struct Percentiles {
  double p50_us = 0;
  double p99_us = 0;
  double max_us = 0;
  std::vector<double> quantiles_us;  // at 0, 1 / kQuantiles, ..., 1
};

Percentiles Summarize(std::vector<double>& samples_us) {
  std::sort(samples_us.begin(), samples_us.end());
  const auto at = [&](double q) {
    return samples_us[std::min(samples_us.size() - 1,
                               static_cast<size_t>(q * static_cast<double>(samples_us.size())))];
  };
  Percentiles result{.p50_us = at(0.50), .p99_us = at(0.99), .max_us = samples_us.back()};
  for (int i = 0; i <= kQuantiles; ++i) result.quantiles_us.push_back(at(double(i) / kQuantiles));
  return result;
}

// Appends `series`' distribution to the --latencies file; false when it cannot be written.
bool AppendQuantiles(const std::string& path, uint64_t holders, std::string_view series,
                     const Percentiles& p) {
  std::ofstream out(path, std::ios::app);
  for (size_t i = 0; i < p.quantiles_us.size(); ++i) {
    out << fmt::format("{} {} {:.3f} {:.3f}\n", holders, series, double(i) / kQuantiles,
                       p.quantiles_us[i]);
  }
  return static_cast<bool>(out);
}

// The floor of a chain lookup on this machine: `reads` random cache-line reads over `bytes` of
// memory on huge pages, prefetched 16 ahead as LookupChain does, timed like a lookup (`samples`
// times; addresses drawn untimed).
Percentiles MeasureFloor(size_t bytes, uint64_t reads, uint64_t samples, std::mt19937_64& rng) {
  constexpr size_t kHuge = 2u << 20;
  bytes = (bytes + kHuge - 1) / kHuge * kHuge;
  void* const raw =
      mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return {};
  auto* const lines = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) &
                                              ~uintptr_t{kHuge - 1});
  (void)madvise(lines, bytes, MADV_HUGEPAGE);
  std::memset(lines, 1, bytes);
  const size_t line_count = bytes / 64;
  std::vector<size_t> at(reads);
  std::vector<double> us;
  us.reserve(samples);
  uint64_t sum = 0;
  for (uint64_t n = 0; n < samples; ++n) {
    for (size_t& a : at) a = rng() % line_count * 64;
    const auto start = Clock::now();
    for (size_t i = 0; i < std::min<size_t>(16, reads); ++i) __builtin_prefetch(lines + at[i]);
    for (size_t i = 0; i < reads; ++i) {
      if (i + 16 < reads) __builtin_prefetch(lines + at[i + 16]);
      sum += *reinterpret_cast<volatile const char*>(lines + at[i]);
    }
    us.push_back(Micros(Clock::now() - start));
  }
  munmap(raw, bytes + kHuge);
  if (sum == 0) return {};  // every byte is 1: keeps the reads
  return Summarize(us);
}

// The steady ingest: instance `step % instances` stores churn chain `step % kChurnChains` and
// removes the one it stored kChurnWindow steps of its own before. Events are made beforehand.
class Churn {
 public:
  Churn(uint64_t first_chain, uint64_t chain_length) {
    for (uint64_t k = 0; k < kChurnChains; ++k) {
      stores_.push_back(
          ChainEvents(first_chain + k, chain_length, ChunkEventKind::kStored, chain_length / 2));
      removals_.push_back(
          ChainEvents(first_chain + k, chain_length, ChunkEventKind::kRemoved, chain_length / 2));
    }
  }

  // One step; the time spent inside Ingest is added to `inside`. Returns the events applied.
  absl::StatusOr<uint64_t> Step(ClusterIndex& index, const std::vector<std::string>& ids,
                                Clock::duration& inside) {
    const uint64_t instance = step_ % ids.size();
    const uint64_t stored = step_ % kChurnChains;
    uint64_t events = 0;
    const auto start = Clock::now();
    absl::Status status = index.Ingest(ids[instance], stores_[stored]);
    events += stores_[stored].size();
    if (status.ok() && step_ >= kChurnWindow * ids.size()) {
      const uint64_t removed = (step_ - kChurnWindow * ids.size()) % kChurnChains;
      status = index.Ingest(ids[instance], removals_[removed]);
      events += removals_[removed].size();
    }
    inside += Clock::now() - start;
    ++step_;
    if (!status.ok()) return status;
    return events;
  }

 private:
  std::vector<std::vector<ChunkEvent>> stores_;
  std::vector<std::vector<ChunkEvent>> removals_;
  uint64_t step_ = 0;
};

// Lookups of chains an instance holds whole, drawn at random from all chains but the shared one,
// so that the index's entries are as cold as a router's random traffic finds them. The chain's
// keys are made just before its lookup, untimed, as a router hashes a prompt and then asks.
absl::StatusOr<Percentiles> TimeLookups(const ClusterIndex& index, const Flags& flags,
                                        const std::vector<uint8_t>& replicas,
                                        std::mt19937_64& rng) {
  std::vector<double> latencies_us;
  latencies_us.reserve(flags.lookups);
  std::vector<ChunkKey> chain_keys;
  for (uint64_t n = 0; n < flags.lookups; ++n) {
    const uint64_t chain = 1 + rng() % (replicas.size() - 1);
    chain_keys = ChainKeys(chain, flags.chain_length);
    const auto start = Clock::now();
    const std::vector<InstanceChainHit> hits = index.LookupChain(chain_keys);
    latencies_us.push_back(Micros(Clock::now() - start));
    if (hits.size() != replicas[chain] || hits.front().prefix_chunks != flags.chain_length) {
      return absl::InternalError(fmt::format("lookup of chain {}: {} holders, expected {}", chain,
                                             hits.size(), replicas[chain]));
    }
  }
  return Summarize(latencies_us);
}

int RunMix(const Flags& flags, uint64_t holders) {
  const uint64_t chains_per_instance = flags.chunks_per_instance / flags.chain_length;
  if (chains_per_instance < 2 || flags.instances < holders || flags.instances > 4096 ||
      holders < 1) {
    return Fail("need at least 2 chains per instance and 1 to 4096 instances, at least --holders");
  }
  std::mt19937_64 rng(flags.seed);

  // Chain 0 is the shared one; the others are numbered from 1, each held by `holders` instances
  // (fewer only for the last ones, when too few instances have room left). holdings[i]: instance
  // i's chains.
  std::vector<std::vector<uint32_t>> holdings(flags.instances, std::vector<uint32_t>{0});
  std::vector<uint8_t> replicas = {0};  // by chain
  {
    std::vector<uint32_t> open(flags.instances);  // instances with chains left to take
    for (uint32_t i = 0; i < flags.instances; ++i) open[i] = i;
    while (!open.empty()) {
      const size_t r = std::min<size_t>(holders, open.size());
      const auto chain = static_cast<uint32_t>(replicas.size());
      replicas.push_back(static_cast<uint8_t>(r));
      // r distinct open instances: a partial shuffle of `open`'s first r places.
      for (size_t k = 0; k < r; ++k) {
        std::swap(open[k], open[k + rng() % (open.size() - k)]);
        holdings[open[k]].push_back(chain);
      }
      for (size_t k = r; k-- > 0;) {
        if (holdings[open[k]].size() == chains_per_instance) {
          open[k] = open.back();
          open.pop_back();
        }
      }
    }
  }
  const uint64_t chains = replicas.size();
  uint64_t pairs = 0;
  for (const auto& h : holdings) pairs += h.size() * flags.chain_length;
  fmt::print(
      "controller_bench, {} holder(s) per chunk: {} instances x {} chunks ({} chains of {}: 1 "
      "shared by all, {} others); {} (chunk, instance) pairs, {} distinct chunks\n",
      holders, flags.instances, chains_per_instance * flags.chain_length, chains_per_instance,
      flags.chain_length, chains - 1, pairs, chains * flags.chain_length);

  std::unique_ptr<ClusterIndex> index = *ClusterIndex::Create({});
  std::vector<std::string> ids;
  for (uint64_t i = 0; i < flags.instances; ++i) {
    ids.push_back(InstanceId(i));
    if (!index->RegisterInstance(ids.back()).ok()) return Fail("register failed");
  }

  // Build: round-robin over the instances, one chain's events per Ingest call.
  const uint64_t rss_before = VmRssBytes();
  Clock::duration ingest_time{};
  uint64_t events = 0;
  const auto build_start = Clock::now();
  for (uint64_t round = 0; round < chains_per_instance; ++round) {
    for (uint64_t i = 0; i < flags.instances; ++i) {
      if (round >= holdings[i].size()) continue;
      const std::vector<ChunkEvent> batch =
          ChainEvents(holdings[i][round], flags.chain_length, ChunkEventKind::kStored,
                      rng() % (flags.chain_length + 1));
      const auto start = Clock::now();
      const absl::Status status = index->Ingest(ids[i], batch);
      ingest_time += Clock::now() - start;
      if (!status.ok()) return Fail(std::string(status.message()));
      events += batch.size();
    }
  }
  const double build_s = Seconds(Clock::now() - build_start);
  const uint64_t rss_after = VmRssBytes();
  const ClusterIndexStats built = index->stats();
  if (built.live_entries != pairs) {
    return Fail(fmt::format("index holds {} pairs, fed {}", built.live_entries, pairs));
  }
  const double build_rate = static_cast<double>(events) / Seconds(ingest_time);
  const double rss_per_pair =
      static_cast<double>(rss_after - rss_before) / static_cast<double>(pairs);
  const double estimate_per_pair =
      static_cast<double>(built.memory_bytes) / static_cast<double>(pairs);
  fmt::print("  build: {} events in {:.1f} s ({:.1f} s inside Ingest)\n", events, build_s,
             Seconds(ingest_time));
  fmt::print("  ingest rate, build, one core:     {:>8.2f} M events/s     target >= 8 M/s    {}\n",
             build_rate / 1e6, Verdict(build_rate >= kIngestTarget));
  fmt::print(
      "  bytes per (chunk, instance):      {:>8.1f} B (VmRSS)       target <= 64 B     {}   "
      "(index estimate {:.1f} B; VmRSS +{:.2f} GiB, {:.2f} GiB on huge pages)\n",
      rss_per_pair, Verdict(rss_per_pair <= kBytesTarget), estimate_per_pair,
      static_cast<double>(rss_after - rss_before) / (1ull << 30),
      static_cast<double>(ProcKbField("/proc/self/smaps_rollup", "AnonHugePages:")) / (1ull << 30));

  // Steady ingest alone: the churn's first kChurnWindow steps per instance fill its window (no
  // removals yet) and are not counted.
  Churn churn(chains, flags.chain_length);
  Clock::duration unused{};
  for (uint64_t n = 0; n < kChurnWindow * flags.instances; ++n) {
    if (!churn.Step(*index, ids, unused).ok()) return Fail("steady ingest failed");
  }
  Clock::duration steady_time{};
  uint64_t steady_events = 0;
  for (const auto steady_start = Clock::now();
       Clock::now() - steady_start < std::chrono::seconds(3);) {
    const absl::StatusOr<uint64_t> applied = churn.Step(*index, ids, steady_time);
    if (!applied.ok()) return Fail(std::string(applied.status().message()));
    steady_events += *applied;
  }
  const double steady_rate = static_cast<double>(steady_events) / Seconds(steady_time);
  fmt::print("  ingest rate, steady, one core:    {:>8.2f} M events/s     target >= 8 M/s    {}\n",
             steady_rate / 1e6, Verdict(steady_rate >= kIngestTarget));

  const Percentiles floor = MeasureFloor(built.memory_bytes, flags.chain_length,
                                         std::max<uint64_t>(1000, flags.lookups / 4), rng);
  fmt::print("  floor, {} random line reads over {:.2f} GiB: p50 {:.2f} us, p99 {:.2f} us\n",
             flags.chain_length, static_cast<double>(built.memory_bytes) / (1ull << 30),
             floor.p50_us, floor.p99_us);

  const absl::StatusOr<Percentiles> alone = TimeLookups(*index, flags, replicas, rng);
  if (!alone.ok()) return Fail(std::string(alone.status().message()));
  fmt::print(
      "  lookup, {}-chunk chain, alone:    p50 {:.2f} us, p99 {:.2f} us  target p99 <= 5 us {}   "
      "({:.1f}x / {:.1f}x the floor; max {:.1f} us)\n",
      flags.chain_length, alone->p50_us, alone->p99_us, Verdict(alone->p99_us <= kLookupTargetUs),
      alone->p50_us / floor.p50_us, alone->p99_us / floor.p99_us, alone->max_us);

  // The same lookups while another thread runs the steady ingest at full speed.
  std::atomic<uint64_t> racing_events{0};
  std::atomic<bool> racing_failed{false};
  Clock::duration racing_inside{};
  absl::StatusOr<Percentiles> racing;
  double racing_wall_s = 0;
  {
    std::jthread writer([&](std::stop_token stop) {
      while (!stop.stop_requested()) {
        const absl::StatusOr<uint64_t> applied = churn.Step(*index, ids, racing_inside);
        if (!applied.ok()) {
          racing_failed = true;
          return;
        }
        racing_events.fetch_add(*applied, std::memory_order_relaxed);
      }
    });
    const auto racing_start = Clock::now();
    racing = TimeLookups(*index, flags, replicas, rng);
    racing_wall_s = Seconds(Clock::now() - racing_start);
  }
  if (racing_failed) return Fail("steady ingest failed during lookups");
  if (!racing.ok()) return Fail(std::string(racing.status().message()));
  const double racing_rate = static_cast<double>(racing_events.load()) / racing_wall_s;
  fmt::print(
      "  lookup, {}-chunk chain, ingest on: p50 {:.2f} us, p99 {:.2f} us  target p99 <= 5 us {}  "
      " ({:.1f}x / {:.1f}x the floor; max {:.1f} us; ingest meanwhile {:.2f} M events/s, {:.2f} "
      "M/s "
      "inside Ingest)\n",
      flags.chain_length, racing->p50_us, racing->p99_us,
      Verdict(racing->p99_us <= kLookupTargetUs), racing->p50_us / floor.p50_us,
      racing->p99_us / floor.p99_us, racing->max_us, racing_rate / 1e6,
      static_cast<double>(racing_events.load()) / Seconds(racing_inside) / 1e6);

  const std::vector<ChunkKey> shared = ChainKeys(0, flags.chain_length);
  std::vector<double> latencies_us;
  for (uint64_t n = 0; n < std::max<uint64_t>(1, flags.lookups / 20); ++n) {
    const auto start = Clock::now();
    const std::vector<InstanceChainHit> hits = index->LookupChain(shared);
    latencies_us.push_back(Micros(Clock::now() - start));
    if (hits.size() != flags.instances) return Fail("shared chain: wrong holder count");
  }
  const Percentiles hot = Summarize(latencies_us);
  if (!flags.latencies_path.empty() &&
      !(AppendQuantiles(flags.latencies_path, holders, "floor", floor) &&
        AppendQuantiles(flags.latencies_path, holders, "alone", *alone) &&
        AppendQuantiles(flags.latencies_path, holders, "ingest", *racing))) {
    return Fail(fmt::format("cannot write {}", flags.latencies_path));
  }
  fmt::print(
      "  lookup, shared chain, {} holders: p50 {:.2f} us, p99 {:.2f} us  (no target: the "
      "answer itself has {} rows)\n",
      flags.instances, hot.p50_us, hot.p99_us, flags.instances);

  // Drop the instance with the most chunks.
  size_t victim = 0;
  for (size_t i = 1; i < holdings.size(); ++i) {
    if (holdings[i].size() > holdings[victim].size()) victim = i;
  }
  const std::string& victim_id = ids[victim];
  const uint64_t victim_live = index->stats().live_entries;
  const auto drop_start = Clock::now();
  if (!index->DropInstance(victim_id).ok()) return Fail("drop failed");
  const double drop_ms = Seconds(Clock::now() - drop_start) * 1e3;
  const uint64_t victim_chunks = victim_live - index->stats().live_entries;
  uint64_t checked = 0;
  for (size_t k = 0; k < holdings[victim].size();
       k += std::max<size_t>(1, holdings[victim].size() / 1000)) {
    for (const InstanceChainHit& hit :
         index->LookupChain(ChainKeys(holdings[victim][k], flags.chain_length))) {
      if (hit.instance_id == victim_id) return Fail("a dropped instance's chunk was reported");
    }
    ++checked;
  }
  fmt::print(
      "  drop an instance of {} chunks:   {:>8.3f} ms              target <= 8 ms     {}   "
      "(then absent from lookups of {} of its chains)\n",
      victim_chunks, drop_ms, Verdict(drop_ms <= kDropTargetMs), checked);

  // Reclaiming its entries: one sweep pass in calls of a budget of 16384 chunks, as an owner's
  // timer would make them.
  std::vector<double> sweep_us;
  uint64_t reclaimed = 0;
  const auto sweep_start = Clock::now();
  for (bool done = false; !done;) {
    const auto start = Clock::now();
    const SweepResult result = index->Sweep(16384);
    sweep_us.push_back(Micros(Clock::now() - start));
    reclaimed += result.reclaimed_entries;
    done = result.pass_completed;
  }
  const double sweep_s = Seconds(Clock::now() - sweep_start);
  const Percentiles sweep = Summarize(sweep_us);
  const ClusterIndexStats swept = index->stats();
  fmt::print(
      "  sweep pass after the drop:        {:.2f} s in {} calls (p99 {:.0f} us, max {:.0f} us "
      "each), {} entries reclaimed, {} stale left, index estimate {:.2f} -> {:.2f} GiB\n",
      sweep_s, sweep_us.size(), sweep.p99_us, sweep.max_us, reclaimed, swept.stale_entries,
      static_cast<double>(built.memory_bytes) / (1ull << 30),
      static_cast<double>(swept.memory_bytes) / (1ull << 30));
  if (reclaimed != victim_chunks || swept.stale_entries != 0) {
    return Fail(
        fmt::format("sweep reclaimed {} entries of the {} dropped", reclaimed, victim_chunks));
  }
  fmt::print(
      "{{\"bench\": \"controller\", \"holders_per_chunk\": {}, \"instances\": {}, \"pairs\": {}, "
      "\"build_events_per_s\": {:.0f}, \"steady_events_per_s\": {:.0f}, \"bytes_per_pair_rss\": "
      "{:.1f}, \"floor_p50_us\": {:.2f}, \"floor_p99_us\": {:.2f}, \"lookup_alone_p50_us\": "
      "{:.2f}, "
      "\"lookup_alone_p99_us\": {:.2f}, \"lookup_ingest_p50_us\": {:.2f}, "
      "\"lookup_ingest_p99_us\": {:.2f}, \"lookup_ingest_p99_over_floor\": {:.2f}, "
      "\"ingest_during_lookups_events_per_s\": {:.0f}, \"drop_ms\": {:.3f}}}\n",
      holders, flags.instances, pairs, build_rate, steady_rate, rss_per_pair, floor.p50_us,
      floor.p99_us, alone->p50_us, alone->p99_us, racing->p50_us, racing->p99_us,
      racing->p99_us / floor.p99_us, racing_rate, drop_ms);
  return 0;
}

}  // namespace
}  // namespace strata::controller

int main(int argc, char** argv) {
  strata::controller::Flags flags;
  const bool parsed = strata::bench::ParseFlags(
      argc, argv,
      "[--instances=N] [--chunks-per-instance=N] [--chain-length=N] [--lookups=N] [--seed=N] "
      "[--holders=N,N...] [--latencies=FILE]",
      [&](std::string_view name, const std::string& value) {
        if (value.empty()) return false;
        if (name == "--latencies") {
          flags.latencies_path = value;
          return true;
        }
        if (name == "--holders") {
          flags.holders.clear();
          for (const absl::string_view part : absl::StrSplit(value, ',')) {
            uint64_t holders = 0;
            if (!absl::SimpleAtoi(part, &holders)) return false;
            flags.holders.push_back(holders);
          }
          return true;
        }
        uint64_t* target = name == "--instances"             ? &flags.instances
                           : name == "--chunks-per-instance" ? &flags.chunks_per_instance
                           : name == "--chain-length"        ? &flags.chain_length
                           : name == "--lookups"             ? &flags.lookups
                           : name == "--seed"                ? &flags.seed
                                                             : nullptr;
        if (target == nullptr) return false;
        *target = std::stoull(value);
        return true;
      });
  if (!parsed) return 2;
  if (!flags.latencies_path.empty() && !std::ofstream(flags.latencies_path)) {
    std::fprintf(stderr, "controller_bench: cannot write %s\n", flags.latencies_path.c_str());
    return 1;
  }
  for (const uint64_t holders : flags.holders) {
    if (const int status = strata::controller::RunMix(flags, holders); status != 0) return status;
  }
  return 0;
}
