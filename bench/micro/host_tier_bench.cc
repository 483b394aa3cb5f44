// Host tier micro-benchmarks (Release). Each prints its figures as counters:
//   BM_LookupChain128      Lookup of a 128-chunk chain (32K tokens) with 1M chunks indexed;
//                          per-lookup p50/p99 measured one by one.
//   BM_IndexBytesPerChunk  RssAnon growth per indexed chunk (index + metadata; the arena is
//                          shmem and not in RssAnon), chunks of one 64-byte page, no payload.
//   BM_PageAllocatorChurn  allocator free+allocate pairs per second at 90% occupancy.
//   BM_StoreSmallChunks    Reserve+Commit of one-page chunks in a full tier (evicting).
//   BM_StoreLoad32MiB      32 MiB chunks (Llama-3.1-8B, 256 tokens) through the arena: one
//                          copy each way, timed phase by phase, against a plain memcpy of the
//                          same size in the same iteration; checksum costs are separate
//                          counters and both with/without figures are reported.
//   BM_StoreLoadByChunkSize  the same against chunk size: range(0) tokens per chunk, 1 to 1024
//                          (128 KiB to 128 MiB), counter chunk_MiB.
#include <time.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/check.h"
#include "core/key_hasher.h"
#include "storage/host/host_tier.h"
#include "storage/host/test_util.h"

namespace strata::storage {
namespace {

using WallClock = std::chrono::steady_clock;

double Seconds(WallClock::duration d) { return std::chrono::duration<double>(d).count(); }

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

uint64_t RssAnonBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  }
  return 0;
}

double Percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  std::nth_element(values.begin(), values.begin() + index, values.end());
  return values[index];
}

// 32 bytes per token, 256 tokens per chunk; a 2-token chunk fills one 64-byte page.
KvLayout TinyLayout() {
  KvLayout layout;
  layout.model_id = "bench-tiny";
  layout.num_layers = 1;
  layout.num_kv_heads = 1;
  layout.head_dim = 8;
  layout.dtype = KvDtype::kFloat16;
  layout.chunk_tokens = 256;
  return layout;
}

// One million committed chunks, built once: 128 of them are the chain of a 32K-token prompt.
struct IndexedTier {
  static constexpr uint64_t kChunks = 1'000'000;
  static constexpr uint32_t kPage = 64;

  IndexedTier() : layout(TinyLayout()) {
    auto hasher = KeyHasher::Create(layout, {});
    STRATA_CHECK(hasher.ok());
    std::vector<uint32_t> tokens(32 * 1024);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 7 + 3);
    chain = hasher->PrefixKeys(tokens, {});
    STRATA_CHECK(chain.size() == 128);

    auto created = HostTier::Create({.capacity_bytes = kChunks * kPage, .page_bytes = kPage});
    STRATA_CHECK(created.ok());
    tier = *std::move(created);
    const uint64_t rss_before = RssAnonBytes();
    auto store = [&](const ChunkKey& key) {
      auto reserved = tier->Reserve(layout, key, {.num_tokens = 2});
      STRATA_CHECK(reserved.ok() && reserved->outcome == ReserveOutcome::kReserved);
      STRATA_CHECK(tier->Commit(std::move(reserved->reservation)).ok());
    };
    for (const ChunkKey& key : chain) store(key);
    const uint64_t fingerprint = layout.Fingerprint();
    for (uint64_t i = chain.size(); i < kChunks; ++i) store(testing::SyntheticKey(fingerprint, i));
    rss_growth = RssAnonBytes() - rss_before;
    STRATA_CHECK(tier->Stats().chunks == kChunks);
  }

  static IndexedTier& Get() {
    static IndexedTier* const indexed = new IndexedTier();
    return *indexed;
  }

  KvLayout layout;
  std::vector<ChunkKey> chain;
  std::unique_ptr<HostTier> tier;
  uint64_t rss_growth = 0;
};

void BM_LookupChain128(benchmark::State& state) {
  IndexedTier& indexed = IndexedTier::Get();
  // Wall-clock latencies, and the thread's CPU time per lookup, which leaves out time the thread
  // spent preempted (these machines are shared; a 2-core box runs other builds).
  std::vector<double> latencies_us;
  std::vector<double> cpu_us;
  latencies_us.reserve(1 << 20);
  cpu_us.reserve(1 << 20);
  for (auto _ : state) {
    const double cpu_start = ThreadCpuSeconds();
    const auto start = WallClock::now();
    const size_t hits = indexed.tier->Lookup(indexed.chain);
    latencies_us.push_back(Seconds(WallClock::now() - start) * 1e6);
    cpu_us.push_back((ThreadCpuSeconds() - cpu_start) * 1e6);
    if (hits != 128) state.SkipWithError("chain not fully cached");
  }
  auto per_thread = [](double value) {
    return benchmark::Counter(value, benchmark::Counter::kAvgThreads);
  };
  state.counters["p50_us"] = per_thread(Percentile(latencies_us, 0.50));
  state.counters["p99_us"] = per_thread(Percentile(latencies_us, 0.99));
  state.counters["p99_cpu_us"] = per_thread(Percentile(cpu_us, 0.99));
  state.counters["chunks_indexed"] = per_thread(double(indexed.tier->Stats().chunks));
  state.SetItemsProcessed(state.iterations() * 128);
}
BENCHMARK(BM_LookupChain128)->Threads(1)->Threads(2)->UseRealTime();

void BM_IndexBytesPerChunk(benchmark::State& state) {
  IndexedTier& indexed = IndexedTier::Get();
  for (auto _ : state) benchmark::DoNotOptimize(indexed.rss_growth);
  state.counters["bytes_per_chunk"] = double(indexed.rss_growth) / IndexedTier::kChunks;
  state.counters["rss_growth_MiB_per_1M_chunks"] =
      double(indexed.rss_growth) / (1 << 20) * (1e6 / IndexedTier::kChunks);
}
BENCHMARK(BM_IndexBytesPerChunk)->Iterations(1);

void BM_PageAllocatorChurn(benchmark::State& state) {
  constexpr uint32_t kPages = 1 << 16;
  PageAllocator allocator(kPages);
  std::mt19937_64 rng(1);
  std::vector<ExtentList> held;
  while (allocator.free_pages() > kPages / 10) {
    held.push_back(*allocator.Allocate(1 + rng() % 16));
  }
  uint64_t extents = 0;
  for (auto _ : state) {
    const size_t victim = rng() % held.size();
    allocator.Free(held[victim]);
    const uint32_t pages = 1 + rng() % 16;
    while (allocator.free_pages() < pages) {  // stay near 90%: free another
      const size_t other = rng() % held.size();
      allocator.Free(held[other]);
      held[other] = *allocator.Allocate(1);
    }
    held[victim] = *allocator.Allocate(pages);
    extents += held[victim].size();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["extents_per_alloc"] = double(extents) / state.iterations();
}
BENCHMARK(BM_PageAllocatorChurn);

void BM_StoreSmallChunks(benchmark::State& state) {
  const KvLayout layout = TinyLayout();
  constexpr uint64_t kCapacityChunks = 1 << 16;
  auto tier = *HostTier::Create({.capacity_bytes = kCapacityChunks * 64, .page_bytes = 64});
  uint64_t id = 0;
  for (; id < kCapacityChunks; ++id) {  // fill: every store below evicts
    auto reserved = tier->Reserve(layout, testing::SyntheticKey(layout, id), {.num_tokens = 2});
    STRATA_CHECK(tier->Commit(std::move(reserved->reservation)).ok());
  }
  const uint64_t fingerprint = layout.Fingerprint();
  for (auto _ : state) {
    auto reserved =
        tier->Reserve(layout, testing::SyntheticKey(fingerprint, id++), {.num_tokens = 2});
    if (!reserved.ok() || reserved->outcome != ReserveOutcome::kReserved) {
      state.SkipWithError("reserve failed");
      break;
    }
    benchmark::DoNotOptimize(tier->Commit(std::move(reserved->reservation)));
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["evictions"] = double(tier->Stats().evictions);
}
BENCHMARK(BM_StoreSmallChunks);

KvLayout Llama8bLayout() {
  KvLayout layout;
  layout.model_id = "llama-3.1-8b";
  layout.num_layers = 32;
  layout.num_kv_heads = 8;
  layout.head_dim = 128;
  layout.dtype = KvDtype::kBfloat16;
  layout.chunk_tokens = 256;
  return layout;
}

// Chunks of `chunk_tokens` tokens of Llama-3.1-8B (128 KiB a token) stored and loaded through
// the arena, each copy timed against a memcpy of the same size in the same iteration.
void StoreLoad(benchmark::State& state, uint32_t chunk_tokens) {
  KvLayout layout = Llama8bLayout();
  layout.chunk_tokens = chunk_tokens;
  const uint64_t chunk_bytes = layout.chunk_bytes(chunk_tokens);
  // 8 chunks of 2 MiB pages (one page a chunk below 2 MiB), prefaulted; verification alternates
  // per chunk (1 in 2), so loads with and without the checksum are timed on the same chunks.
  const auto page_bytes = static_cast<uint32_t>(std::min<uint64_t>(chunk_bytes, 2u << 20));
  auto created = HostTier::Create({.capacity_bytes = 8 * chunk_bytes,
                                   .page_bytes = page_bytes,
                                   .prefault = true,
                                   .verify_every_n_loads = 2});
  if (!created.ok()) {
    state.SkipWithError(std::string(created.status().message()).c_str());
    return;
  }
  HostTier& tier = **created;
  std::vector<std::byte> src = testing::Pattern(1, chunk_bytes);
  std::vector<std::byte> dst(chunk_bytes, std::byte{0});
  std::vector<std::byte> baseline_dst(chunk_bytes, std::byte{0});

  WallClock::duration memcpy_time{}, reserve_copy_time{}, commit_time{}, verified_load_time{},
      load_time{}, checksum_time{};
  uint64_t id = 0;
  uint64_t bad = 0;
  for (auto _ : state) {
    auto t0 = WallClock::now();
    std::memcpy(baseline_dst.data(), src.data(), chunk_bytes);
    benchmark::ClobberMemory();
    auto t1 = WallClock::now();
    memcpy_time += t1 - t0;

    // Store: reserve (evicting the oldest chunk once full), one copy in, commit (checksum).
    const ChunkKey key = testing::SyntheticKey(layout, id++);
    t0 = WallClock::now();
    auto reserved = tier.Reserve(layout, key, {.num_tokens = chunk_tokens});
    if (!reserved.ok()) {
      state.SkipWithError(std::string(reserved.status().message()).c_str());
      break;
    }
    reserved->reservation.payload().CopyFrom(src);
    t1 = WallClock::now();
    const absl::Status committed = tier.Commit(std::move(reserved->reservation));
    const auto t2 = WallClock::now();
    STRATA_CHECK(committed.ok());
    reserve_copy_time += t1 - t0;
    commit_time += t2 - t1;

    // Load twice: the first load of a chunk is verified, the second is not (1 in 2).
    for (int pass = 0; pass < 2; ++pass) {
      t0 = WallClock::now();
      auto lease = tier.Acquire(key);
      STRATA_CHECK(lease.ok() && lease->has_value());
      (*lease)->payload().CopyTo(dst);
      lease->reset();
      benchmark::ClobberMemory();
      t1 = WallClock::now();
      (pass == 0 ? verified_load_time : load_time) += t1 - t0;
    }
    if (dst[chunk_bytes - 1] != src[chunk_bytes - 1] || dst[12345] != src[12345]) ++bad;

    t0 = WallClock::now();
    benchmark::DoNotOptimize(ChecksumBytes(src));
    checksum_time += WallClock::now() - t0;
  }
  if (bad != 0) state.SkipWithError("loaded bytes differ from stored bytes");
  const double bytes = double(chunk_bytes) * state.iterations();
  auto gbps = [&](WallClock::duration d) { return bytes / Seconds(d) / 1e9; };
  const double memcpy_gbps = gbps(memcpy_time);
  state.counters["chunk_MiB"] = double(chunk_bytes) / (1 << 20);
  state.counters["memcpy_GBps"] = memcpy_gbps;
  state.counters["xxh3_GBps"] = gbps(checksum_time);
  // Store without its checksum: Reserve + copy in (Commit, which is the checksum plus a few
  // hundred nanoseconds of bookkeeping, is left out).
  state.counters["store_nocsum_GBps"] = gbps(reserve_copy_time);
  state.counters["store_GBps"] = gbps(reserve_copy_time + commit_time);
  state.counters["load_nocsum_GBps"] = gbps(load_time);
  state.counters["load_GBps"] = gbps(verified_load_time);
  state.counters["store_nocsum_x_memcpy"] = gbps(reserve_copy_time) / memcpy_gbps;
  state.counters["load_nocsum_x_memcpy"] = gbps(load_time) / memcpy_gbps;
  state.counters["store_x_memcpy"] = gbps(reserve_copy_time + commit_time) / memcpy_gbps;
  state.counters["load_x_memcpy"] = gbps(verified_load_time) / memcpy_gbps;
}

void BM_StoreLoad32MiB(benchmark::State& state) { StoreLoad(state, 256); }
BENCHMARK(BM_StoreLoad32MiB)->Unit(benchmark::kMillisecond)->Iterations(48);

void BM_StoreLoadByChunkSize(benchmark::State& state) {
  StoreLoad(state, static_cast<uint32_t>(state.range(0)));
}
BENCHMARK(BM_StoreLoadByChunkSize)
    ->RangeMultiplier(4)
    ->Range(1, 1024)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::storage

BENCHMARK_MAIN();
