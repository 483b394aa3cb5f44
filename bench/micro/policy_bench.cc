// Eviction policy throughput: operations per second on one core in the steady state of a full
// tier holding 10K, 100K or 1M chunks (the argument). Each iteration is one request-shaped mix: a
// hit (OnAccess plus a lease's SetEvictable false / true), an insertion with a parent, and the
// eviction that makes room for it (PopVictim) — 5 policy operations. Target: >= 5M ops/s.
#include <random>

#include "benchmark/benchmark.h"
#include "storage/policy/eviction_policy.h"

namespace strata::storage {
namespace {

constexpr uint64_t kChunkBytes = 4096;
constexpr int kOpsPerIteration = 5;

void BM_PolicySteadyState(benchmark::State& state, std::string_view name, bool quotas) {
  const uint64_t kResident = static_cast<uint64_t>(state.range(0));
  PolicyOptions options{.capacity_bytes = kResident * kChunkBytes};
  if (quotas) {
    for (uint32_t t = 0; t < 8; ++t)
      options.tenant_quotas.push_back({t, options.capacity_bytes / 4});
  }
  std::unique_ptr<EvictionPolicy> policy = *MakeEvictionPolicy(name, options);
  std::mt19937_64 rng(7);
  // Ids live in a ring: the resident ones are [oldest, next), some already evicted.
  ChunkId next = 1;
  auto insert = [&] {
    const ChunkId id = next++;
    policy->OnInsert({.id = id,
                      .key_hash = rng() % (4 * kResident),  // recurring keys: ghost hits
                      .size_bytes = kChunkBytes,
                      .parent = id > 1 && rng() % 4 != 0 ? id - 1 : kNoChunk,
                      .partial = rng() % 16 == 0,
                      .tenant = static_cast<uint32_t>(id % 8)});
  };
  for (uint64_t i = 0; i < kResident; ++i) insert();
  for (auto _ : state) {
    // A hit on a recent chunk (skewed toward the newest), leased while read.
    const ChunkId hit = next - 1 - (rng() % std::min<uint64_t>(next - 1, kResident / 4));
    policy->OnAccess(hit);
    policy->SetEvictable(hit, false);
    policy->SetEvictable(hit, true);
    benchmark::DoNotOptimize(policy->PopVictim());
    insert();
  }
  state.SetItemsProcessed(state.iterations() * kOpsPerIteration);
  state.counters["resident"] = static_cast<double>(policy->size());
}

BENCHMARK_CAPTURE(BM_PolicySteadyState, adaptive, "adaptive", false)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000);
BENCHMARK_CAPTURE(BM_PolicySteadyState, lru, "lru", false)->Arg(10000)->Arg(100000)->Arg(1000000);
BENCHMARK_CAPTURE(BM_PolicySteadyState, arc, "arc", false)->Arg(10000)->Arg(100000)->Arg(1000000);
BENCHMARK_CAPTURE(BM_PolicySteadyState, s3fifo, "s3fifo", false)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000);
BENCHMARK_CAPTURE(BM_PolicySteadyState, prefix_lru, "prefix-lru", false)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000);
BENCHMARK_CAPTURE(BM_PolicySteadyState, adaptive_8_tenant_quotas, "adaptive", true)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000);

}  // namespace
}  // namespace strata::storage

BENCHMARK_MAIN();
