// Codec micro-benchmarks (Release): each codec of storage/codec on one 32 MiB chunk of Llama-3.1-8B
// geometry (32 layers, 8 KV heads x 128, 256 tokens) in bf16 or fp16, holding shaped KV
// (storage/codec/testing/shaped_kv.h: outlier key channels, per-token value scales) or low-rank KV
// (the same file: token factors shared across layers, as xKV reports of pre-RoPE KV).
//
// BM_Codec/<codec>/<dtype>/<group_size>/<bits>/<shape>/<energy> prints, as counters:
//   ratio                raw bytes / encoded bytes (frame included)
//   rel_err, max_abs     relative Frobenius and max absolute error of a decode of that KV
//   gauss_rel_err        the same relative error on N(0, 1) KV (ALGORITHMS.md 5a's figures)
//   attn_rel_err         ||o - o'|| / ||o|| of one layer's attention output (layer 0; 32 N(0, 1)
//                        queries per KV head, no mask, kernels/paged_attention.h's CPU reference)
//                        over the decoded KV (o') against the original (o)
//   encode_GBps          raw bytes encoded per second
//   decode_GBps          raw (output) bytes decoded per second by Decode, checksums included
//   decode_layer_GBps    the same through DecodeLayer, one call per layer
//   memcpy_GBps          a memcpy of the raw chunk into a separate buffer, timed in the same
//                        iterations (the bound a decode into memory could reach)
//   decode_x_memcpy      decode_GBps / memcpy_GBps
//   x_quantizer          cachegen only: the bytes its quantizer alone would take (codes packed at
//                        <bits>, scales and zeros: CacheGenCodec::QuantizedOnlyBytes) / encoded
//                        bytes, i.e. what the entropy stage saves (issue 16's target: >= 1.3)
//   rank_k, rank_v       xkv only: the mean rank of the key and value planes over the groups
// Every figure is per thread CPU second on one core (CLOCK_THREAD_CPUTIME_ID), so a loaded
// machine slows the wall clock but not the figures; output buffers are prefaulted.
//   <dtype>: 0 bf16, 1 fp16. <group_size>, <bits>: CodecParams (0: the codec's default).
//   <shape>: 0 shaped, 1 low-rank. <energy>: xkv's CodecParams::energy in thousandths (0: 0.99).
#include <time.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/check.h"
#include "kernels/paged_attention.h"
#include "storage/codec/cachegen_codec.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/codec/xkv_codec.h"

namespace strata::storage {
namespace {

constexpr uint32_t kTokens = 256;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

KvLayout Llama8bLayout(KvDtype dtype) {
  KvLayout layout;
  layout.model_id = "meta-llama/Llama-3.1-8B";
  layout.num_layers = 32;
  layout.num_kv_heads = 8;
  layout.head_dim = 128;
  layout.dtype = dtype;
  layout.chunk_tokens = kTokens;
  return layout;
}

// Layer 0's attention output for `queries` ([n, num_kv_heads, head_dim] fp32) over the chunk's
// 256 tokens of K and V, unmasked, as fp32.
std::vector<float> AttentionOutput(const KvLayout& layout, std::span<const std::byte> payload,
                                   std::span<const float> queries) {
  const int64_t heads = layout.num_kv_heads, dim = layout.head_dim;
  const int64_t n = static_cast<int64_t>(queries.size()) / (heads * dim);
  std::vector<std::byte> k(payload.begin(), payload.begin() + layout.plane_offset(0, 1, kTokens));
  std::vector<std::byte> v(payload.begin() + layout.plane_offset(0, 1, kTokens),
                           payload.begin() + layout.layer_bytes(kTokens));
  const int64_t extent = kTokens * heads * dim;
  std::vector<float> out(queries.size());
  const int32_t block_table[] = {0}, seq_lens[] = {kTokens};
  const int32_t query_start_loc[] = {0, static_cast<int32_t>(n)};
  kernels::PagedAttentionArgs args{
      .q = kernels::ConstHeadsView::Dense(queries.data(), KvDtype::kFloat32, n, heads, dim),
      .out = kernels::HeadsView::Dense(out.data(), KvDtype::kFloat32, n, heads, dim),
      .kv_spec = kernels::PagedKvSpec::Contiguous(layout.dtype, 2, 1, kTokens, heads, dim),
      .kv = kernels::PagedKvLayer::FromSeparatePlanes(k.data(), extent, v.data(), extent),
      .block_table = block_table,
      .max_blocks_per_seq = 1,
      .seq_lens = seq_lens,
      .query_start_loc = query_start_loc,
      .causal = false};
  STRATA_CHECK(kernels::PagedAttention(args).ok());
  return out;
}

double AttentionError(const KvLayout& layout, std::span<const std::byte> original,
                      std::span<const std::byte> decoded) {
  std::vector<float> queries(32ull * layout.num_kv_heads * layout.head_dim);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  for (float& q : queries) q = normal(rng);
  const std::vector<float> o = AttentionOutput(layout, original, queries);
  const std::vector<float> o2 = AttentionOutput(layout, decoded, queries);
  double err2 = 0, norm2 = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    err2 += double(o[i] - o2[i]) * (o[i] - o2[i]);
    norm2 += double(o[i]) * o[i];
  }
  return std::sqrt(err2 / norm2);
}

// Payloads are generated once per (dtype, shape) and shared by every benchmark.
const std::vector<std::byte>& Payload(const KvLayout& layout, testing::KvShape shape) {
  static std::map<std::tuple<KvDtype, testing::KvShape>, std::vector<std::byte>> cache;
  auto [it, inserted] = cache.try_emplace({layout.dtype, shape});
  if (inserted) it->second = testing::MakeKv(layout, kTokens, shape, 42);
  return it->second;
}

void BM_Codec(benchmark::State& state, std::string_view codec_name) {
  const KvLayout layout =
      Llama8bLayout(state.range(0) == 0 ? KvDtype::kBfloat16 : KvDtype::kFloat16);
  const CodecParams params{.group_size = static_cast<uint32_t>(state.range(1)),
                           .bits = static_cast<uint32_t>(state.range(2)),
                           .energy = static_cast<float>(state.range(4)) / 1000};
  const Codec& codec = **CodecRegistry::Find(codec_name);
  const bool low_rank = state.range(3) == 1;
  const std::vector<std::byte>& payload =
      Payload(layout, low_rank ? testing::KvShape::kLowRank : testing::KvShape::kShaped);
  const uint64_t raw_bytes = payload.size();
  std::vector<std::byte> decoded(raw_bytes, std::byte{1});
  std::vector<std::byte> copied(raw_bytes, std::byte{1});
  std::vector<std::byte> layer_out(layout.layer_bytes(kTokens), std::byte{1});

  // Errors, outside the timed loop.
  {
    const std::vector<std::byte>& gauss = Payload(layout, testing::KvShape::kGaussian);
    absl::StatusOr<std::vector<std::byte>> encoded = codec.Encode(layout, kTokens, gauss, params);
    STRATA_CHECK(encoded.ok() && codec.Decode(layout, *encoded, decoded).ok());
    state.counters["gauss_rel_err"] =
        testing::CompareKv(layout.dtype, gauss, decoded).relative_frobenius;
  }

  double encode_s = 0, decode_s = 0, layer_s = 0, memcpy_s = 0;
  uint64_t encoded_bytes = 0;
  for (auto _ : state) {
    double t0 = ThreadCpuSeconds();
    absl::StatusOr<std::vector<std::byte>> encoded = codec.Encode(layout, kTokens, payload, params);
    double t1 = ThreadCpuSeconds();
    STRATA_CHECK(encoded.ok());
    encode_s += t1 - t0;
    encoded_bytes = encoded->size();

    t0 = ThreadCpuSeconds();
    STRATA_CHECK(codec.Decode(layout, *encoded, decoded).ok());
    benchmark::ClobberMemory();
    t1 = ThreadCpuSeconds();
    decode_s += t1 - t0;

    t0 = ThreadCpuSeconds();
    for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
      STRATA_CHECK(codec.DecodeLayer(layout, *encoded, layer, layer_out).ok());
      benchmark::ClobberMemory();
    }
    t1 = ThreadCpuSeconds();
    layer_s += t1 - t0;

    t0 = ThreadCpuSeconds();
    std::memcpy(copied.data(), payload.data(), raw_bytes);
    benchmark::ClobberMemory();
    t1 = ThreadCpuSeconds();
    memcpy_s += t1 - t0;
  }
  const testing::KvError error = testing::CompareKv(layout.dtype, payload, decoded);
  const double bytes = double(raw_bytes) * double(state.iterations());
  state.counters["ratio"] = double(raw_bytes) / double(encoded_bytes);
  state.counters["rel_err"] = error.relative_frobenius;
  state.counters["max_abs"] = error.max_abs;
  state.counters["attn_rel_err"] = AttentionError(layout, payload, decoded);
  state.counters["encode_GBps"] = bytes / encode_s / 1e9;
  state.counters["decode_GBps"] = bytes / decode_s / 1e9;
  state.counters["decode_layer_GBps"] = bytes / layer_s / 1e9;
  state.counters["memcpy_GBps"] = bytes / memcpy_s / 1e9;
  state.counters["decode_x_memcpy"] = memcpy_s / decode_s;
  if (codec.id() == CodecId::kCacheGen) {
    const absl::StatusOr<uint64_t> quantized =
        CacheGenCodec::QuantizedOnlyBytes(layout, kTokens, params);
    STRATA_CHECK(quantized.ok());
    state.counters["x_quantizer"] = double(*quantized) / double(encoded_bytes);
  }
  if (codec.id() == CodecId::kXkv) {
    const absl::StatusOr<std::vector<uint32_t>> ranks =
        XkvCodec::Ranks(layout, *codec.Encode(layout, kTokens, payload, params));
    STRATA_CHECK(ranks.ok());
    double k = 0, v = 0;
    for (size_t i = 0; i < ranks->size(); i += 2) {
      k += (*ranks)[i];
      v += (*ranks)[i + 1];
    }
    state.counters["rank_k"] = k / double(ranks->size() / 2);
    state.counters["rank_v"] = v / double(ranks->size() / 2);
  }
  state.SetLabel(std::string(codec_name) + (state.range(0) == 0 ? " bf16" : " fp16") +
                 (low_rank ? " low-rank" : " shaped"));
}

void Register(const char* name, std::vector<std::vector<int64_t>> args) {
  auto* bench =
      benchmark::RegisterBenchmark((std::string("BM_Codec/") + name).c_str(),
                                   [name](benchmark::State& state) { BM_Codec(state, name); });
  for (const std::vector<int64_t>& a : args) bench->Args(a);
  bench->Iterations(6)->Unit(benchmark::kMillisecond);
}

const bool kRegistered = [] {
  Register("int8", {{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}});
  Register("kivi4", {{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {0, 128, 0, 0, 0}});
  Register("kivi2", {{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}});
  Register("cachegen",
           {{0, 0, 8, 0, 0}, {1, 0, 8, 0, 0}, {0, 0, 4, 0, 0}, {0, 0, 2, 0, 0}, {0, 128, 8, 0, 0}});
  Register(
      "xkv",
      {{0, 0, 0, 1, 0}, {0, 0, 0, 1, 999}, {0, 0, 0, 1, 900}, {0, 8, 0, 1, 0}, {0, 0, 0, 0, 0}});
  return true;
}();

}  // namespace
}  // namespace strata::storage

BENCHMARK_MAIN();
