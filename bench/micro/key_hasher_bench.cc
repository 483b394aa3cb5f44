// Chain hashing throughput of both key algorithms, in bytes of token ids (4 bytes per token)
// hashed per second on one core. Targets: xxh3_128 >= 1 GB/s, sha256_cbor >= 200 MB/s.
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/key_hasher.h"

namespace strata {
namespace {

KvLayout Llama8B() {
  KvLayout layout;
  layout.model_id = "meta-llama/Llama-3.1-8B";
  layout.num_layers = 32;
  layout.num_kv_heads = 8;
  layout.head_dim = 128;
  return layout;
}

// Token ids drawn from Llama 3's 128K vocabulary: most need 3 or 5 CBOR bytes.
std::vector<uint32_t> RandomTokens(size_t n) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> dist(0, 128255);
  std::vector<uint32_t> tokens(n);
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

void BM_PrefixChain(benchmark::State& state, HashAlgorithm algorithm) {
  const size_t num_tokens = static_cast<size_t>(state.range(0));
  const KeyHasher hasher = *KeyHasher::Create(Llama8B(), {.algorithm = algorithm});
  const std::vector<uint32_t> tokens = RandomTokens(num_tokens);
  for (auto _ : state) {
    auto keys = hasher.PrefixKeys(tokens, {});
    benchmark::DoNotOptimize(keys.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * num_tokens * 4));
  state.counters["chunks"] = static_cast<double>(num_tokens / hasher.chunk_tokens());
}

BENCHMARK_CAPTURE(BM_PrefixChain, xxh3_128, HashAlgorithm::kXxh3_128)->Arg(32768);
BENCHMARK_CAPTURE(BM_PrefixChain, sha256_cbor, HashAlgorithm::kSha256Cbor)->Arg(32768);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
