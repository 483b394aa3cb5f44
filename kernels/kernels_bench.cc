// Throughput of the kernels' CPU references (single-threaded), and fused-RoPE paged attention
// against "apply RoPE to every K, then standard paged attention" on the same inputs, with the ratio
// reported by the FusedVsUnfused benchmarks (counter `fused_over_unfused`; target <= 1.3).
#include <chrono>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/check.h"
#include "kernels/blend.h"
#include "kernels/kv_transfer.h"
#include "kernels/page_scores.h"
#include "kernels/paged_attention.h"
#include "kernels/quant.h"
#include "kernels/rope.h"
#include "kernels/testing/test_util.h"

namespace strata::kernels {
namespace {

using testing::HostTensor;

RopeTable Llama3Table(int64_t max_position, KvDtype dtype) {
  RopeConfig c;
  c.rotary_dim = 128;
  c.theta = 500000;
  c.scaling = RopeScaling::kLlama3;
  c.max_position = max_position;
  c.table_dtype = dtype;
  c.precision = AnglePrecision::kFp64;
  absl::StatusOr<RopeTable> t = RopeTable::Create(c);
  STRATA_CHECK(t.ok());
  return *std::move(t);
}

// ---- Gather / scatter: 4 chunks of 256 tokens, 8 KV heads x 128, bf16, block 16, 4 layers.
struct TransferSetup {
  static constexpr int64_t kLayers = 4, kChunks = 4, kChunkTokens = 256, kHeads = 8, kDim = 128,
                           kBlock = 16;
  PagedKvSpec spec;
  std::vector<HostTensor> engine;
  std::vector<PagedKvLayer> layers;
  std::vector<HostTensor> chunks;
  std::vector<int32_t> table;
  std::optional<TransferPlan> plan;

  TransferSetup() {
    const int64_t blocks = kChunks * kChunkTokens / kBlock;
    spec = PagedKvSpec::Contiguous(KvDtype::kBfloat16, 2, blocks, kBlock, kHeads, kDim);
    std::mt19937_64 rng(1);
    for (int64_t l = 0; l < kLayers; ++l) {
      engine.emplace_back(KvDtype::kBfloat16, 2 * spec.PlaneExtentElems());
      engine.back().FillNormal(rng);
      layers.push_back(PagedKvLayer::FromStackedPlanes(engine.back().data(), KvDtype::kBfloat16, 2,
                                                       spec.PlaneExtentElems(),
                                                       2 * spec.PlaneExtentElems()));
    }
    table.resize(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<ChunkCopy> copies;
    for (int64_t c = 0; c < kChunks; ++c) {
      chunks.emplace_back(KvDtype::kBfloat16, kLayers * 2 * kChunkTokens * kHeads * kDim);
      copies.push_back(
          {chunks.back().data(), kChunkTokens, 0, kChunkTokens, c * kChunkTokens / kBlock, 0});
    }
    plan =
        *TransferPlan::Create(spec, {KvDtype::kBfloat16, kLayers, 2, kHeads, kDim}, copies, table);
  }
  int64_t bytes() const { return kLayers * 2 * kChunks * kChunkTokens * kHeads * kDim * 2; }
};

void BM_GatherKv(benchmark::State& state) {
  TransferSetup s;
  for (auto _ : state) STRATA_CHECK(GatherKv(*s.plan, s.layers, 0).ok());
  state.SetBytesProcessed(state.iterations() * s.bytes());
}
BENCHMARK(BM_GatherKv)->Unit(benchmark::kMillisecond);

void BM_ScatterKvPerLayer(benchmark::State& state) {
  TransferSetup s;
  for (auto _ : state) {
    for (int64_t l = 0; l < TransferSetup::kLayers; ++l) {
      STRATA_CHECK(ScatterKvLayer(*s.plan, s.layers[static_cast<size_t>(l)], l).ok());
    }
  }
  state.SetBytesProcessed(state.iterations() * s.bytes());
}
BENCHMARK(BM_ScatterKvPerLayer)->Unit(benchmark::kMillisecond);

// ---- RoPE: 1024 tokens x 8 heads x 128, bf16 (args: 0 = apply, 1 = re-rotate).
void BM_Rope(benchmark::State& state) {
  const int64_t tokens = 1024, heads = 8, dim = 128;
  const RopeTable table = Llama3Table(8192, KvDtype::kBfloat16);
  std::mt19937_64 rng(2);
  HostTensor x(KvDtype::kBfloat16, tokens * heads * dim);
  x.FillNormal(rng);
  std::vector<int64_t> pos(tokens), pos2(tokens);
  for (int64_t t = 0; t < tokens; ++t) {
    pos[t] = t;
    pos2[t] = t + 3000;
  }
  const HeadsView v = HeadsView::Dense(x.data(), x.dtype(), tokens, heads, dim);
  for (auto _ : state) {
    if (state.range(0) == 0) {
      STRATA_CHECK(ApplyRope(table, v, v, pos).ok());
    } else {
      STRATA_CHECK(ReRotateRope(table, v, pos, pos2).ok());
    }
  }
  state.SetBytesProcessed(state.iterations() * x.size_bytes() * 2);
  state.SetLabel(state.range(0) == 0 ? "apply" : "re-rotate");
}
BENCHMARK(BM_Rope)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// ---- Attention: a NoPE bf16 cache, every block used (so "RoPE every K" rotates exactly the keys
// attention reads).
struct AttentionSetup {
  int64_t block = 16, kv_heads, q_heads, dim = 128;
  std::vector<int32_t> seq_lens, qsl, table;
  std::vector<int64_t> qpos, key_pos;
  int64_t max_blocks = 0, tokens = 0;
  PagedKvSpec spec;
  HostTensor k, v, q, out, k_rot, q_rot;
  RopeTable rope;

  AttentionSetup(int64_t seqs, int64_t seq_len, int64_t queries, int64_t kv_heads_in, int64_t group)
      : kv_heads(kv_heads_in),
        q_heads(kv_heads_in * group),
        rope(Llama3Table(8192, KvDtype::kBfloat16)) {
    max_blocks = seq_len / block;
    const int64_t blocks = seqs * max_blocks;
    spec = PagedKvSpec::Contiguous(KvDtype::kBfloat16, 2, blocks, block, kv_heads, dim);
    std::mt19937_64 rng(3);
    k = HostTensor(KvDtype::kBfloat16, spec.PlaneExtentElems());
    v = HostTensor(KvDtype::kBfloat16, spec.PlaneExtentElems());
    k.FillNormal(rng);
    v.FillNormal(rng);
    table.resize(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    key_pos.assign(static_cast<size_t>(blocks * block), 0);
    qsl = {0};
    for (int64_t s = 0; s < seqs; ++s) {
      seq_lens.push_back(static_cast<int32_t>(seq_len));
      qsl.push_back(static_cast<int32_t>(qsl.back() + queries));
      for (int64_t i = 0; i < queries; ++i) qpos.push_back(seq_len - queries + i);
      for (int64_t j = 0; j < max_blocks; ++j) {
        const int64_t physical = table[static_cast<size_t>(s * max_blocks + j)];
        for (int64_t t = 0; t < block; ++t)
          key_pos[static_cast<size_t>(physical * block + t)] = j * block + t;
      }
    }
    tokens = qsl.back();
    q = HostTensor(KvDtype::kBfloat16, tokens * q_heads * dim);
    q.FillNormal(rng);
    out = HostTensor(KvDtype::kBfloat16, q.size());
    k_rot = HostTensor(KvDtype::kBfloat16, k.size());
    q_rot = HostTensor(KvDtype::kBfloat16, q.size());
  }
  PagedAttentionArgs Args(bool fused) {
    PagedAttentionArgs a;
    a.q = ConstHeadsView::Dense(fused ? q.data() : q_rot.data(), q.dtype(), tokens, q_heads, dim);
    a.out = HeadsView::Dense(out.data(), out.dtype(), tokens, q_heads, dim);
    a.kv_spec = spec;
    a.kv = PagedKvLayer::FromSeparatePlanes(fused ? k.data() : k_rot.data(), k.size(), v.data(),
                                            v.size());
    a.block_table = table;
    a.max_blocks_per_seq = max_blocks;
    a.seq_lens = seq_lens;
    a.query_start_loc = qsl;
    a.query_positions = qpos;
    if (fused) a.rope = rope.view();
    return a;
  }
  void Fused() { STRATA_CHECK(PagedAttention(Args(true)).ok()); }
  void Unfused() {
    // RoPE applied to every K of the cache (into a rotated copy, as an engine with a RoPE'd cache
    // would hold it) and to q, then standard paged attention.
    const int64_t slots = spec.num_blocks * block;
    STRATA_CHECK(ApplyRope(rope, ConstHeadsView::Dense(k.data(), k.dtype(), slots, kv_heads, dim),
                           HeadsView::Dense(k_rot.data(), k.dtype(), slots, kv_heads, dim), key_pos)
                     .ok());
    STRATA_CHECK(ApplyRope(rope, ConstHeadsView::Dense(q.data(), q.dtype(), tokens, q_heads, dim),
                           HeadsView::Dense(q_rot.data(), q.dtype(), tokens, q_heads, dim), qpos)
                     .ok());
    STRATA_CHECK(PagedAttention(Args(false)).ok());
  }
};

// Decode: 2 sequences x 2048 keys, 32 query heads over 8 KV heads (Llama-3-8B shape).
AttentionSetup DecodeSetup() { return AttentionSetup(2, 2048, 1, 8, 4); }
// Prefill / append: 1 sequence, 128 new tokens over 1024 keys, 8 query heads over 2 KV heads.
AttentionSetup PrefillSetup() { return AttentionSetup(1, 1024, 128, 2, 4); }

void BM_AttentionDecode(benchmark::State& state) {
  AttentionSetup s = DecodeSetup();
  for (auto _ : state) state.range(0) ? s.Fused() : s.Unfused();
  state.SetLabel(state.range(0) ? "fused RoPE" : "RoPE every K, then attention");
}
BENCHMARK(BM_AttentionDecode)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

void BM_AttentionPrefill(benchmark::State& state) {
  AttentionSetup s = PrefillSetup();
  for (auto _ : state) state.range(0) ? s.Fused() : s.Unfused();
  state.SetLabel(state.range(0) ? "fused RoPE" : "RoPE every K, then attention");
}
BENCHMARK(BM_AttentionPrefill)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);

// Both paths interleaved in one loop on the same inputs (alternating which runs first, so neither
// inherits the other's cache state systematically); reports their times and the ratio.
void FusedVsUnfused(benchmark::State& state, AttentionSetup s) {
  using Clock = std::chrono::steady_clock;
  double fused_s = 0, unfused_s = 0;
  bool fused_first = true;
  auto timed = [](auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (auto _ : state) {
    if (fused_first) {
      fused_s += timed([&] { s.Fused(); });
      unfused_s += timed([&] { s.Unfused(); });
    } else {
      unfused_s += timed([&] { s.Unfused(); });
      fused_s += timed([&] { s.Fused(); });
    }
    fused_first = !fused_first;
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["fused_ms"] = 1e3 * fused_s / n;
  state.counters["unfused_ms"] = 1e3 * unfused_s / n;
  state.counters["fused_over_unfused"] = fused_s / unfused_s;
}
void BM_FusedVsUnfusedDecode(benchmark::State& state) { FusedVsUnfused(state, DecodeSetup()); }
void BM_FusedVsUnfusedPrefill(benchmark::State& state) { FusedVsUnfused(state, PrefillSetup()); }
BENCHMARK(BM_FusedVsUnfusedDecode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FusedVsUnfusedPrefill)->Unit(benchmark::kMillisecond);

// ---- Quantization of a 256-token x 1024-channel bf16 block (args: bits, axis 0 = per token).
void BM_Quantize(benchmark::State& state) {
  const int64_t rows = 256, cols = 1024;
  const QuantParams p{QuantScheme::kAsymmetric,
                      state.range(1) == 0 ? QuantAxis::kPerToken : QuantAxis::kPerChannel,
                      static_cast<int>(state.range(0)), 32};
  std::mt19937_64 rng(4);
  HostTensor x(KvDtype::kBfloat16, rows * cols), back(KvDtype::kBfloat16, rows * cols);
  x.FillNormal(rng);
  const QuantizedSizes sizes = *QuantizedSizesFor(p, rows, cols);
  std::vector<uint32_t> codes(static_cast<size_t>(sizes.code_words));
  std::vector<float> scales(static_cast<size_t>(sizes.num_groups)), zeros(scales.size());
  for (auto _ : state) {
    STRATA_CHECK(
        Quantize(p, ConstMatrixView::Dense(x.data(), x.dtype(), rows, cols), codes, scales, zeros)
            .ok());
    STRATA_CHECK(Dequantize(p, codes, scales, zeros,
                            MatrixView::Dense(back.data(), back.dtype(), rows, cols))
                     .ok());
  }
  state.SetBytesProcessed(state.iterations() * x.size_bytes());
  state.SetLabel("quantize + dequantize");
}
BENCHMARK(BM_Quantize)
    ->Args({8, 0})
    ->Args({8, 1})
    ->Args({4, 0})
    ->Args({4, 1})
    ->Unit(benchmark::kMicrosecond);

// ---- Dequantization alone, of a 256-token x 1024-channel block into a buffer that stays in cache
// (the kernel's own rate; codec_bench times whole decodes), on each CPU path, so that the SIMD
// paths read as ratios to the baseline of the same run. Args: out dtype (0 bf16, 1 fp16), scheme
// (0 int8 symmetric per token and head of 128, 1 kivi4 keys per channel, 2 kivi4 values per token;
// groups of 32), path (1 baseline, 2 AVX2, 3 AVX-512).
void BM_Dequantize(benchmark::State& state) {
  const int64_t rows = 256, cols = 1024;
  const KvDtype dtype = state.range(0) == 0 ? KvDtype::kBfloat16 : KvDtype::kFloat16;
  const QuantParams p =
      state.range(1) == 0
          ? QuantParams{QuantScheme::kSymmetric, QuantAxis::kPerToken, 8, 128}
          : QuantParams{QuantScheme::kAsymmetric,
                        state.range(1) == 1 ? QuantAxis::kPerChannel : QuantAxis::kPerToken, 4, 32};
  const auto path = static_cast<internal::DequantizePath>(state.range(2));
  if (!internal::DequantizePathAvailable(path)) {
    state.SkipWithError("this CPU has no such path");
    return;
  }
  std::mt19937_64 rng(4);
  HostTensor x(dtype, rows * cols), back(dtype, rows * cols);
  x.FillNormal(rng);
  const QuantizedSizes sizes = *QuantizedSizesFor(p, rows, cols);
  std::vector<uint32_t> codes(static_cast<size_t>(sizes.code_words));
  std::vector<float> scales(static_cast<size_t>(sizes.num_groups)), zeros(scales.size());
  STRATA_CHECK(
      Quantize(p, ConstMatrixView::Dense(x.data(), dtype, rows, cols), codes, scales, zeros).ok());
  for (auto _ : state) {
    STRATA_CHECK(internal::DequantizeOnPath(path, p, codes, scales, zeros,
                                            MatrixView::Dense(back.data(), dtype, rows, cols))
                     .ok());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * back.size_bytes());
  constexpr const char* kPathNames[] = {"", "baseline", "avx2", "avx512"};
  state.SetLabel(std::string(DtypeName(dtype)) + " output, " + kPathNames[state.range(2)]);
}
BENCHMARK(BM_Dequantize)
    ->ArgsProduct({{0, 1}, {0, 1, 2}, {1, 2, 3}})
    ->Unit(benchmark::kMicrosecond);

// ---- Page summaries + scores + top-K: 512 pages of 16 tokens, 8 KV heads x 128, 32 query heads.
void BM_PageScoring(benchmark::State& state) {
  const int64_t pages = 512, bs = 16, kv_heads = 8, dim = 128, q_heads = 32;
  const PagedKvSpec spec = PagedKvSpec::Contiguous(KvDtype::kBfloat16, 1, pages, bs, kv_heads, dim);
  std::mt19937_64 rng(5);
  HostTensor k(KvDtype::kBfloat16, spec.PlaneExtentElems()), q(KvDtype::kBfloat16, q_heads * dim);
  k.FillNormal(rng);
  q.FillNormal(rng);
  std::vector<int32_t> ids(pages), tokens(pages, bs), selected(kv_heads * 64);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> summaries(pages * kv_heads * 2 * dim), scores(kv_heads * pages);
  const PagedKvLayer layer = PagedKvLayer::FromSeparatePlanes(k.data(), k.size(), nullptr, 0);
  const int64_t phase = state.range(0);
  if (phase == 1) STRATA_CHECK(BuildPageSummaries({spec, layer, ids, tokens, {}, summaries}).ok());
  PageScoreArgs a;
  a.q = ConstHeadsView::Dense(q.data(), q.dtype(), 1, q_heads, dim);
  a.summaries = summaries;
  a.num_pages = pages;
  a.num_kv_heads = kv_heads;
  a.scores = scores;
  for (auto _ : state) {
    if (phase == 0) {
      STRATA_CHECK(BuildPageSummaries({spec, layer, ids, tokens, {}, summaries}).ok());
    } else {
      STRATA_CHECK(ScorePages(a).ok());
      STRATA_CHECK(SelectTopPages(scores, kv_heads, pages, 64, true, selected).ok());
    }
  }
  state.SetLabel(phase == 0 ? "summaries (512 pages)" : "score + top-64 (512 pages)");
}
BENCHMARK(BM_PageScoring)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// ---- CacheBlend: deviation over 4096 tokens x 1024 channels (bf16) + top-15 % selection.
void BM_Blend(benchmark::State& state) {
  const int64_t tokens = 4096, channels = 1024;
  std::mt19937_64 rng(6);
  HostTensor a(KvDtype::kBfloat16, tokens * channels), b(KvDtype::kBfloat16, tokens * channels);
  a.FillNormal(rng);
  b.FillNormal(rng);
  std::vector<float> dev(tokens);
  for (auto _ : state) {
    STRATA_CHECK(TokenDeviation(ConstMatrixView::Dense(a.data(), a.dtype(), tokens, channels),
                                ConstMatrixView::Dense(b.data(), b.dtype(), tokens, channels), dev)
                     .ok());
    benchmark::DoNotOptimize(SelectBlendTokens(dev, 64, 0.15));
  }
  state.SetBytesProcessed(state.iterations() * 2 * a.size_bytes());
}
BENCHMARK(BM_Blend)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::kernels

BENCHMARK_MAIN();
