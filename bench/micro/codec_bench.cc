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
//                        bytes, i.e. what the entropy stage saves (target: >= 1.3)
//   rank_k, rank_v       xkv only: the mean rank of the key and value planes over the groups
// BM_TokenDrop/<codec>/<recent_tokens>/<heavy_tokens>/<queries>: the token-dropping codecs, on the
// same KV as nope keys, with the attention error over the kept tokens at their positions (see
// there). Every figure is per thread CPU second on one core (CLOCK_THREAD_CPUTIME_ID), so a loaded
// machine slows the wall clock but not the figures; output buffers are prefaulted.
//   <dtype>: 0 bf16, 1 fp16. <group_size>, <bits>: CodecParams (0: the codec's default).
//   <shape>: 0 shaped, 1 low-rank. <energy>: xkv's CodecParams::energy in thousandths (0: 0.99).
//
// An operator's own KV: --kv-file=PATH --kv-layout=layers=N,kv_heads=N,head_dim=N,dtype=D[,kind=K]
// runs every codec on the file instead: one chunk's layer-major payload (core/kv_layout.h:
// [layer][plane][token][kv_head][head_dim] in the dtype) of any number of tokens (the file's size
// over the bytes per token). <dtype> and <shape> are then ignored; a codec that cannot take the
// layout reports why. Example, a dump of 256 tokens of Llama-3.1-8B:
//   codec_bench --kv-file=kv.bin --kv-layout=layers=32,kv_heads=8,head_dim=128,dtype=bf16
#include <time.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/check.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"
#include "storage/codec/cachegen_codec.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/kv_error.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/codec/token_drop_codec.h"
#include "storage/codec/xkv_codec.h"

namespace strata::storage {
namespace {

constexpr uint32_t kTokens = 256;

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// The thread CPU seconds `work` takes, its writes made visible to the compiler.
template <class Work>
double CpuSecondsOf(Work&& work) {
  const double start = ThreadCpuSeconds();
  work();
  benchmark::ClobberMemory();
  return ThreadCpuSeconds() - start;
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

// How attention reads a chunk: in one block of every token, no RoPE (the quantizing codecs' rows:
// they change values, not positions), or in blocks at given positions in the prompt with RoPE
// (the token-dropping codecs' rows: kept blocks keep their positions, the fused-RoPE kernel over
// nope keys).
struct AttentionReading {
  uint32_t block_tokens = 0;                 // 0: one block of every token
  std::span<const int64_t> block_positions;  // per block; empty: 0, B, 2B, ...
  std::span<const int64_t> query_positions;  // with `rope`
  const kernels::RopeTable* rope = nullptr;  // null: no RoPE
};

// Layer 0's attention output for `queries` ([n, num_kv_heads, head_dim] fp32) over `tokens`
// tokens of a chunk's K and V (`payload`, a chunk of `tokens` tokens), unmasked, as fp32. MHA
// layouts only.
std::vector<float> AttentionOutput(const KvLayout& layout, std::span<const std::byte> payload,
                                   uint32_t tokens, std::span<const float> queries,
                                   const AttentionReading& reading = {}) {
  const int64_t heads = layout.num_kv_heads, dim = layout.head_dim;
  const int64_t n = static_cast<int64_t>(queries.size()) / (heads * dim);
  const int64_t block = reading.block_tokens == 0 ? tokens : reading.block_tokens;
  const int64_t blocks = (tokens + block - 1) / block;
  // The planes padded to whole blocks (a short last block's slots are never read).
  std::vector<std::byte> k(blocks * block * layout.plane_token_bytes());
  std::vector<std::byte> v(k.size());
  std::memcpy(k.data(), payload.data(), layout.plane_offset(0, 1, tokens));
  std::memcpy(v.data(), payload.data() + layout.plane_offset(0, 1, tokens),
              layout.plane_offset(0, 1, tokens));
  const int64_t extent = blocks * block * heads * dim;
  std::vector<float> out(queries.size());
  std::vector<int32_t> block_table(blocks);
  for (int64_t b = 0; b < blocks; ++b) block_table[b] = static_cast<int32_t>(b);
  const int32_t seq_lens[] = {static_cast<int32_t>(tokens)};
  const int32_t query_start_loc[] = {0, static_cast<int32_t>(n)};
  kernels::PagedAttentionArgs args{
      .q = kernels::ConstHeadsView::Dense(queries.data(), KvDtype::kFloat32, n, heads, dim),
      .out = kernels::HeadsView::Dense(out.data(), KvDtype::kFloat32, n, heads, dim),
      .kv_spec = kernels::PagedKvSpec::Contiguous(layout.dtype, 2, blocks, block, heads, dim),
      .kv = kernels::PagedKvLayer::FromSeparatePlanes(k.data(), extent, v.data(), extent),
      .block_table = block_table,
      .max_blocks_per_seq = blocks,
      .seq_lens = seq_lens,
      .query_start_loc = query_start_loc,
      .query_positions = reading.query_positions,
      .block_positions = reading.block_positions,
      .causal = false};
  if (reading.rope != nullptr) args.rope = reading.rope->view();
  STRATA_CHECK(kernels::PagedAttention(args).ok());
  return out;
}

// 32 queries per KV head, from `seed`: N(0, 1) entries, or with `shared` a direction common to
// every query of a head (N(0, 1) entries from a fixed seed) plus N(0, 0.5^2) noise, as a trained
// model's queries share a large mean, which makes the same keys heavy hitters for every query.
std::vector<float> Queries(const KvLayout& layout, uint64_t seed, bool shared = false) {
  const uint64_t head_dims = uint64_t{layout.num_kv_heads} * layout.head_dim;
  std::vector<float> queries(32 * head_dims);
  std::mt19937_64 rng(seed), common_rng(99);
  std::normal_distribution<float> normal;
  std::vector<float> common(head_dims, 0.0f);
  if (shared) {
    for (float& c : common) c = normal(common_rng);
  }
  const float noise = shared ? 0.5f : 1.0f;
  for (uint64_t i = 0; i < queries.size(); ++i) {
    queries[i] = common[i % head_dims] + noise * normal(rng);
  }
  return queries;
}

// ||o - o'|| / ||o||.
double RelativeError(std::span<const float> o, std::span<const float> o2) {
  double err2 = 0, norm2 = 0;
  for (size_t i = 0; i < o.size(); ++i) {
    err2 += double(o[i] - o2[i]) * (o[i] - o2[i]);
    norm2 += double(o[i]) * o[i];
  }
  return std::sqrt(err2 / norm2);
}

double AttentionError(const KvLayout& layout, std::span<const std::byte> original,
                      std::span<const std::byte> decoded) {
  const std::vector<float> queries = Queries(layout, 7);
  return RelativeError(AttentionOutput(layout, original, layout.chunk_tokens, queries),
                       AttentionOutput(layout, decoded, layout.chunk_tokens, queries));
}

// A user's KV (--kv-file, --kv-layout): one layer-major chunk payload; its token count is the
// file's size over the layout's bytes per token (layout.chunk_tokens is set to it).
struct UserKv {
  KvLayout layout;
  std::vector<std::byte> payload;
};
std::optional<UserKv>& User() {
  static std::optional<UserKv> user;
  return user;
}

// "layers=32,kv_heads=8,head_dim=128,dtype=bf16,kind=mha" (model= and positional= too).
absl::StatusOr<KvLayout> ParseLayoutSpec(std::string_view spec) {
  KvLayout layout;
  layout.model_id = "kv-file";
  while (!spec.empty()) {
    const std::string_view field = spec.substr(0, spec.find(','));
    spec.remove_prefix(std::min(spec.size(), field.size() + 1));
    const size_t equals = field.find('=');
    const std::string_view key = field.substr(0, equals);
    const std::string_view value =
        equals == std::string_view::npos ? std::string_view() : field.substr(equals + 1);
    uint32_t number = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    const bool numeric = error == std::errc() && end == value.data() + value.size();
    if (key == "layers" && numeric) {
      layout.num_layers = number;
    } else if (key == "kv_heads" && numeric) {
      layout.num_kv_heads = number;
    } else if (key == "head_dim" && numeric) {
      layout.head_dim = number;
    } else if (key == "dtype") {
      STRATA_ASSIGN_OR_RETURN(layout.dtype, ParseKvDtype(value));
    } else if (key == "kind") {
      STRATA_ASSIGN_OR_RETURN(layout.kind, ParseKvKind(value));
    } else if (key == "positional") {
      STRATA_ASSIGN_OR_RETURN(layout.positional, ParsePositionalFormat(value));
    } else if (key == "model") {
      layout.model_id = std::string(value);
    } else {
      return absl::InvalidArgumentError(fmt::format(
          "--kv-layout: '{}' is not one of layers=N, kv_heads=N, head_dim=N, dtype=, kind=, "
          "positional=, model=",
          field));
    }
  }
  return layout;
}

absl::StatusOr<UserKv> LoadUserKv(const std::string& path, std::string_view spec) {
  UserKv user;
  STRATA_ASSIGN_OR_RETURN(user.layout, ParseLayoutSpec(spec));
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(fmt::format("--kv-file: cannot open {}", path));
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const uint64_t per_token = user.layout.bytes_per_token();
  if (per_token == 0 || bytes.empty() || bytes.size() % per_token != 0 ||
      bytes.size() / per_token > (1u << 20)) {
    return absl::InvalidArgumentError(fmt::format(
        "--kv-file: {} holds {} bytes, not a whole number (1 or more) of {}-byte tokens of {}",
        path, bytes.size(), per_token, user.layout.DebugString()));
  }
  user.layout.chunk_tokens = static_cast<uint32_t>(bytes.size() / per_token);
  STRATA_RETURN_IF_ERROR(user.layout.Validate());
  user.payload.resize(bytes.size());
  std::memcpy(user.payload.data(), bytes.data(), bytes.size());
  return user;
}

// Payloads are generated once per (dtype, shape) and shared by every benchmark.
const std::vector<std::byte>& Payload(const KvLayout& layout, testing::KvShape shape) {
  static std::map<std::tuple<KvDtype, testing::KvShape>, std::vector<std::byte>> cache;
  auto [it, inserted] = cache.try_emplace({layout.dtype, shape});
  if (inserted) it->second = testing::MakeKv(layout, layout.chunk_tokens, shape, 42);
  return it->second;
}

void BM_Codec(benchmark::State& state, std::string_view codec_name) {
  const std::optional<UserKv>& user = User();
  const KvLayout layout =
      user ? user->layout
           : Llama8bLayout(state.range(0) == 0 ? KvDtype::kBfloat16 : KvDtype::kFloat16);
  const uint32_t tokens = layout.chunk_tokens;
  const CodecParams params{.group_size = static_cast<uint32_t>(state.range(1)),
                           .bits = static_cast<uint32_t>(state.range(2)),
                           .energy = static_cast<float>(state.range(4)) / 1000};
  const Codec& codec = **CodecRegistry::Find(codec_name);
  const bool low_rank = state.range(3) == 1;
  const std::vector<std::byte>& payload =
      user ? user->payload
           : Payload(layout, low_rank ? testing::KvShape::kLowRank : testing::KvShape::kShaped);
  const uint64_t raw_bytes = payload.size();
  std::vector<std::byte> decoded(raw_bytes, std::byte{1});
  std::vector<std::byte> copied(raw_bytes, std::byte{1});
  std::vector<std::byte> layer_out(layout.layer_bytes(tokens), std::byte{1});

  // Errors, outside the timed loop.
  {
    const std::vector<std::byte>& gauss = Payload(layout, testing::KvShape::kGaussian);
    absl::StatusOr<std::vector<std::byte>> encoded = codec.Encode(layout, tokens, gauss, params);
    if (!encoded.ok()) {  // a codec that cannot take this layout or these parameters
      state.SkipWithError(std::string(encoded.status().message()).c_str());
      return;
    }
    STRATA_CHECK(codec.Decode(layout, *encoded, decoded).ok());
    state.counters["gauss_rel_err"] = CompareKv(layout.dtype, gauss, decoded).relative_frobenius;
  }

  double encode_s = 0, decode_s = 0, layer_s = 0, memcpy_s = 0;
  std::vector<std::byte> last_encoded;  // the last iteration's frame, for its size and ranks
  for (auto _ : state) {
    absl::StatusOr<std::vector<std::byte>> encoded;
    encode_s += CpuSecondsOf([&] { encoded = codec.Encode(layout, tokens, payload, params); });
    STRATA_CHECK(encoded.ok());
    decode_s += CpuSecondsOf([&] { STRATA_CHECK(codec.Decode(layout, *encoded, decoded).ok()); });
    layer_s += CpuSecondsOf([&] {
      for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
        STRATA_CHECK(codec.DecodeLayer(layout, *encoded, layer, layer_out).ok());
        benchmark::ClobberMemory();
      }
    });
    memcpy_s += CpuSecondsOf([&] { std::memcpy(copied.data(), payload.data(), raw_bytes); });
    last_encoded = *std::move(encoded);
  }
  const uint64_t encoded_bytes = last_encoded.size();
  const KvError error = CompareKv(layout.dtype, payload, decoded);
  const double bytes = double(raw_bytes) * double(state.iterations());
  state.counters["ratio"] = double(raw_bytes) / double(encoded_bytes);
  state.counters["rel_err"] = error.relative_frobenius;
  state.counters["max_abs"] = error.max_abs;
  if (layout.kind == KvKind::kMha) {
    state.counters["attn_rel_err"] = AttentionError(layout, payload, decoded);
  }
  state.counters["encode_GBps"] = bytes / encode_s / 1e9;
  state.counters["decode_GBps"] = bytes / decode_s / 1e9;
  state.counters["decode_layer_GBps"] = bytes / layer_s / 1e9;
  state.counters["memcpy_GBps"] = bytes / memcpy_s / 1e9;
  state.counters["decode_x_memcpy"] = memcpy_s / decode_s;
  if (codec.id() == CodecId::kCacheGen) {
    const absl::StatusOr<uint64_t> quantized =
        CacheGenCodec::QuantizedOnlyBytes(layout, tokens, params);
    STRATA_CHECK(quantized.ok());
    state.counters["x_quantizer"] = double(*quantized) / double(encoded_bytes);
  }
  if (codec.id() == CodecId::kXkv) {
    const absl::StatusOr<std::vector<uint32_t>> ranks = XkvCodec::Ranks(layout, last_encoded);
    STRATA_CHECK(ranks.ok());
    double k = 0, v = 0;
    for (size_t i = 0; i < ranks->size(); i += 2) {
      k += (*ranks)[i];
      v += (*ranks)[i + 1];
    }
    state.counters["rank_k"] = k / double(ranks->size() / 2);
    state.counters["rank_v"] = v / double(ranks->size() / 2);
  }
  state.SetLabel(std::string(codec_name) +
                 (user ? " kv-file"
                       : std::string(state.range(0) == 0 ? " bf16" : " fp16") +
                             (low_rank ? " low-rank" : " shaped")));
}

// The token-dropping codecs' rows read the chunk where a prompt puts it: from position 1024, with
// Llama-3's RoPE (theta 500000, the head's every channel rotated, no scaling).
constexpr int64_t kChunkStart = 1024;

// H2O's importance of each token (layer 0; the engine supplies one vector for every layer): the
// attention probability it receives from `queries` at `query_positions`, summed over the queries
// and heads, with keys rotated at kChunkStart + t.
std::vector<float> AttentionImportance(const KvLayout& layout, std::span<const std::byte> payload,
                                       uint32_t tokens, std::span<const float> queries,
                                       std::span<const int64_t> query_positions,
                                       const kernels::RopeTable& rope) {
  const int64_t heads = layout.num_kv_heads, dim = layout.head_dim;
  const int64_t n = static_cast<int64_t>(query_positions.size());
  std::vector<float> k(tokens * heads * dim), q(queries.begin(), queries.end());
  for (uint64_t i = 0; i < k.size(); ++i) k[i] = ElementAt(layout.dtype, payload, i);
  std::vector<int64_t> key_positions(tokens);
  for (uint32_t t = 0; t < tokens; ++t) key_positions[t] = kChunkStart + t;
  const auto rotate = [&](std::vector<float>& x, int64_t rows, std::span<const int64_t> at) {
    STRATA_CHECK(kernels::ApplyRope(
                     rope,
                     kernels::ConstHeadsView::Dense(x.data(), KvDtype::kFloat32, rows, heads, dim),
                     kernels::HeadsView::Dense(x.data(), KvDtype::kFloat32, rows, heads, dim), at)
                     .ok());
  };
  rotate(k, tokens, key_positions);
  rotate(q, n, query_positions);
  std::vector<float> importance(tokens, 0.0f);
  std::vector<double> scores(tokens);
  const double scale = 1.0 / std::sqrt(double(dim));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* qi = &q[(i * heads + h) * dim];
      double top = -INFINITY, sum = 0;
      for (uint32_t t = 0; t < tokens; ++t) {
        const float* kt = &k[(t * heads + h) * dim];
        double dot = 0;
        for (int64_t d = 0; d < dim; ++d) dot += double(qi[d]) * kt[d];
        scores[t] = dot * scale;
        top = std::max(top, scores[t]);
      }
      for (double& score : scores) sum += (score = std::exp(score - top));
      for (uint32_t t = 0; t < tokens; ++t) importance[t] += static_cast<float>(scores[t] / sum);
    }
  }
  return importance;
}

// sqrt(sum of squares of the dropped tokens / of every token), over every layer and plane: the
// relative Frobenius error were the dropped tokens read as zeros.
double DroppedShare(const KvLayout& layout, std::span<const std::byte> payload, uint32_t tokens,
                    const KeptTokens& kept) {
  std::vector<bool> kept_token(tokens, false);
  for (uint32_t b : kept.blocks) {
    for (uint32_t t = b * kept.block_tokens; t < std::min(tokens, (b + 1) * kept.block_tokens);
         ++t) {
      kept_token[t] = true;
    }
  }
  const uint64_t per_token = layout.plane_token_bytes() / DtypeSizeBytes(layout.dtype);
  double dropped = 0, all = 0;
  for (uint64_t i = 0; i < payload.size() / DtypeSizeBytes(layout.dtype); ++i) {
    const double x = ElementAt(layout.dtype, payload, i);
    all += x * x;
    if (!kept_token[(i / per_token) % tokens]) dropped += x * x;
  }
  return std::sqrt(dropped / all);
}

// BM_TokenDrop/<codec>/<recent_tokens>/<heavy_tokens>/<queries> (blocks of 16, one sink block;
// <queries> 0: N(0, 1), 1: sharing a direction per head, see Queries) on nope KV (the shaped KV
// as pre-RoPE keys; or the user's, whose layout must say positional=nope):
//   ratio          raw bytes / encoded bytes;  kept_share  kept tokens / tokens
//   attn_rel_err   ||o - o'|| / ||o|| of layer 0's attention for 32 N(0, 1) queries per KV head at
//                  the 32 positions after the chunk: o over every token, o' over the kept blocks at
//                  their own positions (block_positions), both with RoPE
//   rel_err        DroppedShare: the dropped tokens' share of the KV's norm
//   encode_GBps    raw bytes encoded per second;  kept_GBps  kept bytes DecodeKept delivers per
//                  second;  memcpy_GBps as BM_Codec's
// drop_h2o's importance: AttentionImportance of 32 other N(0, 1) queries at the chunk's last 32
// positions (the engine's prefill queries, as H2O accumulates them).
void BM_TokenDrop(benchmark::State& state, std::string_view codec_name) {
  const std::optional<UserKv>& user = User();
  KvLayout layout = user ? user->layout : Llama8bLayout(KvDtype::kBfloat16);
  if (!user) layout.positional = PositionalFormat::kNope;
  const uint32_t tokens = layout.chunk_tokens;
  const std::vector<std::byte>& payload =
      user ? user->payload : Payload(layout, testing::KvShape::kShaped);
  const auto& codec = dynamic_cast<const TokenDropCodec&>(**CodecRegistry::Find(codec_name));
  const bool shared = state.range(2) >= 1, oracle = state.range(2) == 2;
  if (layout.kind != KvKind::kMha) {
    state.SkipWithError("the attention figures need K and V planes (an MHA layout)");
    return;
  }
  absl::StatusOr<kernels::RopeTable> rope =
      kernels::RopeTable::Create({.rotary_dim = layout.head_dim,
                                  .theta = 500000.0,
                                  .max_position = kChunkStart + tokens + 64});
  STRATA_CHECK(rope.ok());
  std::vector<int64_t> after(32), last(32);
  for (int64_t i = 0; i < 32; ++i) {
    after[i] = kChunkStart + tokens + i;
    last[i] = kChunkStart + std::max<int64_t>(0, int64_t{tokens} - 32 + i);
  }
  std::vector<float> importance;
  if (codec.id() == CodecId::kDropH2o) {
    importance =
        oracle
            ? AttentionImportance(layout, payload, tokens, Queries(layout, 7, shared), after, *rope)
            : AttentionImportance(layout, payload, tokens, Queries(layout, 8, shared), last, *rope);
  }
  const CodecParams params{.recent_tokens = static_cast<uint32_t>(state.range(0)),
                           .heavy_tokens = static_cast<uint32_t>(state.range(1)),
                           .importance = importance};
  if (absl::Status s = codec.CheckParams(layout, params); !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return;
  }
  const uint64_t raw_bytes = payload.size();
  std::vector<std::byte> copied(raw_bytes, std::byte{1});
  double encode_s = 0, kept_s = 0, memcpy_s = 0;
  std::vector<std::byte> frame;
  std::optional<KeptTokens> kept;
  for (auto _ : state) {
    absl::StatusOr<std::vector<std::byte>> encoded;
    encode_s += CpuSecondsOf([&] { encoded = codec.Encode(layout, tokens, payload, params); });
    STRATA_CHECK(encoded.ok());
    absl::StatusOr<KeptTokens> decoded;
    kept_s += CpuSecondsOf([&] { decoded = codec.DecodeKept(layout, *encoded); });
    STRATA_CHECK(decoded.ok());
    memcpy_s += CpuSecondsOf([&] { std::memcpy(copied.data(), payload.data(), raw_bytes); });
    frame = *std::move(encoded);
    kept = *std::move(decoded);
  }
  const double iterations = double(state.iterations());
  std::vector<int64_t> every_block((tokens + kept->block_tokens - 1) / kept->block_tokens);
  for (size_t b = 0; b < every_block.size(); ++b) {
    every_block[b] = kChunkStart + int64_t(b) * kept->block_tokens;
  }
  std::vector<int64_t> kept_positions = kept->BlockPositions();
  for (int64_t& p : kept_positions) p += kChunkStart;
  const std::vector<float> queries = Queries(layout, 7, shared);
  const std::vector<float> o = AttentionOutput(layout, payload, tokens, queries,
                                               {.block_tokens = kept->block_tokens,
                                                .block_positions = every_block,
                                                .query_positions = after,
                                                .rope = &*rope});
  const std::vector<float> o2 = AttentionOutput(layout, kept->payload, kept->num_tokens, queries,
                                                {.block_tokens = kept->block_tokens,
                                                 .block_positions = kept_positions,
                                                 .query_positions = after,
                                                 .rope = &*rope});
  state.counters["ratio"] = double(raw_bytes) / double(frame.size());
  state.counters["kept_share"] = double(kept->num_tokens) / tokens;
  state.counters["attn_rel_err"] = RelativeError(o, o2);
  state.counters["rel_err"] = DroppedShare(layout, payload, tokens, *kept);
  state.counters["encode_GBps"] = double(raw_bytes) * iterations / encode_s / 1e9;
  state.counters["kept_GBps"] = double(kept->payload.size()) * iterations / kept_s / 1e9;
  state.counters["memcpy_GBps"] = double(raw_bytes) * iterations / memcpy_s / 1e9;
  state.SetLabel(fmt::format("{} keeps {} of {} tokens{}{}", codec_name, kept->num_tokens, tokens,
                             user ? " kv-file" : " bf16 shaped",
                             shared ? ", queries sharing a direction" : ""));
}

void RegisterTokenDrop(const char* name, std::vector<std::vector<int64_t>> args) {
  auto* bench =
      benchmark::RegisterBenchmark((std::string("BM_TokenDrop/") + name).c_str(),
                                   [name](benchmark::State& state) { BM_TokenDrop(state, name); });
  for (const std::vector<int64_t>& a : args) bench->Args(a);
  bench->Iterations(6)->Unit(benchmark::kMillisecond);
}

void Register(const char* name, std::vector<std::vector<int64_t>> args) {
  auto* bench =
      benchmark::RegisterBenchmark((std::string("BM_Codec/") + name).c_str(),
                                   [name](benchmark::State& state) { BM_Codec(state, name); });
  for (const std::vector<int64_t>& a : args) bench->Args(a);
  bench->Iterations(6)->Unit(benchmark::kMillisecond);
}

void RegisterAll() {
  if (User()) {  // the user's KV, in its own dtype: each codec at its defaults, and a few variants
    Register("int8", {{0, 0, 0, 0, 0}});
    Register("kivi8", {{0, 0, 0, 0, 0}});
    Register("kivi4", {{0, 0, 0, 0, 0}, {0, 32, 0, 0, 0}});
    Register("kivi2", {{0, 0, 0, 0, 0}});
    Register("cachegen", {{0, 0, 8, 0, 0}, {0, 0, 4, 0, 0}});
    Register("xkv", {{0, 0, 0, 0, 0}, {0, 0, 0, 0, 999}});
    RegisterTokenDrop("drop_sink_recent", {{0, 0, 0}, {0, 0, 1}});
    RegisterTokenDrop("drop_h2o", {{32, 0, 0}, {32, 0, 1}});
    return;
  }
  Register("int8", {{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}});
  Register("kivi8", {{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {0, 32, 0, 0, 0}, {0, 256, 0, 0, 0}});
  Register("kivi4", {{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {0, 32, 0, 0, 0}, {0, 128, 0, 0, 0}});
  Register("kivi2", {{0, 0, 0, 0, 0}, {1, 0, 0, 0, 0}});
  Register("cachegen",
           {{0, 0, 8, 0, 0}, {1, 0, 8, 0, 0}, {0, 0, 4, 0, 0}, {0, 0, 2, 0, 0}, {0, 128, 8, 0, 0}});
  Register(
      "xkv",
      {{0, 0, 0, 1, 0}, {0, 0, 0, 1, 999}, {0, 0, 0, 1, 900}, {0, 8, 0, 1, 0}, {0, 0, 0, 0, 0}});
  // Budgets of 48, 80 and 128 of 256 tokens: sink 16 + recent (+ heavy).
  RegisterTokenDrop("drop_sink_recent",
                    {{0, 0, 0}, {64, 0, 0}, {112, 0, 0}, {0, 0, 1}, {64, 0, 1}, {112, 0, 1}});
  RegisterTokenDrop("drop_h2o", {{16, 16, 0},
                                 {32, 0, 0},
                                 {32, 80, 0},
                                 {16, 16, 1},
                                 {32, 0, 1},
                                 {32, 80, 1},
                                 {16, 16, 2},
                                 {32, 0, 2},
                                 {32, 80, 2}});
}

}  // namespace
}  // namespace strata::storage

// Takes --kv-file=PATH and --kv-layout=SPEC out of the arguments; Google Benchmark reads the rest.
int main(int argc, char** argv) {
  std::string kv_file, kv_layout;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--kv-file=")) {
      kv_file = arg.substr(10);
    } else if (arg.starts_with("--kv-layout=")) {
      kv_layout = arg.substr(12);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (!kv_file.empty() || !kv_layout.empty()) {
    absl::StatusOr<strata::storage::UserKv> user = strata::storage::LoadUserKv(kv_file, kv_layout);
    if (!user.ok()) {
      std::fprintf(stderr, "codec_bench: %s\n", std::string(user.status().message()).c_str());
      return 2;
    }
    strata::storage::User() = *std::move(user);
  }
  strata::storage::RegisterAll();
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
