#include "tests/support/tiny_transformer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <utility>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/blend.h"
#include "kernels/paged_attention.h"

namespace strata::testing {
namespace {

// y[n] = x[m] W[m][n].
void MatVec(const float* x, const std::vector<float>& w, int64_t m, int64_t n, float* y) {
  std::fill(y, y + n, 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    const float xi = x[i];
    const float* row = w.data() + i * n;
    for (int64_t j = 0; j < n; ++j) y[j] += xi * row[j];
  }
}

void RmsNorm(const float* x, const std::vector<float>& gain, int64_t n, float* y) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  const auto scale = static_cast<float>(1.0 / std::sqrt(sum / double(n) + 1e-6));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale * gain[i];
}

std::vector<float> Random(std::mt19937_64& rng, int64_t n, float stddev) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = normal(rng);
  return values;
}

std::vector<float> Gains(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<float> uniform(0.8f, 1.2f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = uniform(rng);
  return values;
}

absl::Status ValidateTokens(std::span<const uint32_t> tokens, int64_t vocab) {
  for (const uint32_t token : tokens) {
    if (token >= vocab) {
      return absl::InvalidArgumentError(fmt::format("tiny transformer: token {} >= vocab", token));
    }
  }
  return absl::OkStatus();
}

// kInvalidArgument unless `tokens` are token indices of an n-token prompt, strictly ascending.
absl::Status ValidateRecomputed(std::span<const int32_t> tokens, int64_t n) {
  if (!std::is_sorted(tokens.begin(), tokens.end(), std::less_equal<>()) ||
      (!tokens.empty() && (tokens.front() < 0 || tokens.back() >= n))) {
    return absl::InvalidArgumentError("tiny transformer: recomputed tokens not ascending in range");
  }
  return absl::OkStatus();
}

// The rows `rows` of a row-major matrix of `width` columns, in that order.
std::vector<float> GatherRows(std::span<const float> m, int64_t width,
                              std::span<const int32_t> rows) {
  std::vector<float> out;
  out.reserve(rows.size() * static_cast<size_t>(width));
  for (const int32_t r : rows) {
    const auto row = m.subspan(static_cast<size_t>(r * width), static_cast<size_t>(width));
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// The embedding rows of `tokens`: [token][hidden].
std::vector<float> Embed(const std::vector<float>& embedding, std::span<const uint32_t> tokens,
                         int64_t hidden) {
  std::vector<float> x(tokens.size() * static_cast<size_t>(hidden));
  for (size_t t = 0; t < tokens.size(); ++t) {
    std::copy_n(embedding.begin() + tokens[t] * hidden, hidden, x.begin() + t * hidden);
  }
  return x;
}

}  // namespace

TinyKv TinyKv::Zeros(const TinyConfig& c, int64_t tokens) {
  const auto rows = static_cast<size_t>(tokens * c.kv_width());
  TinyKv kv;
  kv.keys.assign(static_cast<size_t>(c.layers), std::vector<float>(rows, 0.0f));
  kv.values.assign(static_cast<size_t>(c.layers), std::vector<float>(rows, 0.0f));
  kv.positions.resize(static_cast<size_t>(tokens));
  std::iota(kv.positions.begin(), kv.positions.end(), 0);
  return kv;
}

TinyKv TinyKv::Slice(int64_t begin, int64_t end) const {
  TinyKv out;
  const size_t layers = keys.size();
  const size_t width = positions.empty() ? 0 : keys[0].size() / positions.size();
  for (size_t l = 0; l < layers; ++l) {
    out.keys.emplace_back(keys[l].begin() + begin * width, keys[l].begin() + end * width);
    out.values.emplace_back(values[l].begin() + begin * width, values[l].begin() + end * width);
  }
  out.positions.assign(positions.begin() + begin, positions.begin() + end);
  return out;
}

TinyKv TinyKv::Concat(const TinyKv& other) const {
  if (positions.empty()) return other;
  TinyKv out = *this;
  for (size_t l = 0; l < keys.size(); ++l) {
    out.keys[l].insert(out.keys[l].end(), other.keys[l].begin(), other.keys[l].end());
    out.values[l].insert(out.values[l].end(), other.values[l].begin(), other.values[l].end());
  }
  out.positions.insert(out.positions.end(), other.positions.begin(), other.positions.end());
  return out;
}

TinyKv TinyKv::AtPositions(int64_t first_position) const {
  TinyKv out = *this;
  std::iota(out.positions.begin(), out.positions.end(), first_position);
  return out;
}

absl::StatusOr<TinyTransformer> TinyTransformer::Create(const TinyConfig& c) {
  if (c.layers <= 0 || c.q_heads <= 0 || c.kv_heads <= 0 || c.head_dim <= 0 || c.ffn_dim <= 0 ||
      c.vocab <= 0 || c.max_position <= 0 || c.q_heads % c.kv_heads != 0 || c.head_dim % 2 != 0) {
    return absl::InvalidArgumentError("tiny transformer: bad configuration");
  }
  kernels::RopeConfig rope_config;
  rope_config.rotary_dim = c.head_dim;
  rope_config.theta = c.rope_theta;
  rope_config.max_position = c.max_position;
  STRATA_ASSIGN_OR_RETURN(kernels::RopeTable rope, kernels::RopeTable::Create(rope_config));
  TinyTransformer model(c, std::move(rope));
  std::mt19937_64 rng(c.seed);
  const int64_t h = c.hidden(), kv = c.kv_width();
  model.embedding_ = Random(rng, c.vocab * h, 1.0f);
  for (int64_t l = 0; l < c.layers; ++l) {
    // Projections scaled by 1/sqrt(fan-in), so activations keep their size through the layers.
    const auto in_scale = static_cast<float>(1.0 / std::sqrt(double(h)));
    Layer layer;
    layer.attn_norm = Gains(rng, h);
    // Queries and keys 2x larger than the rest: sharper attention, as trained models have.
    layer.wq = Random(rng, h * h, 2 * in_scale);
    layer.wk = Random(rng, h * kv, 2 * in_scale);
    layer.wv = Random(rng, h * kv, in_scale);
    layer.wo = Random(rng, h * h, in_scale);
    layer.mlp_norm = Gains(rng, h);
    layer.w_gate = Random(rng, h * c.ffn_dim, in_scale);
    layer.w_up = Random(rng, h * c.ffn_dim, in_scale);
    layer.w_down =
        Random(rng, c.ffn_dim * h, static_cast<float>(1.0 / std::sqrt(double(c.ffn_dim))));
    model.layers_.push_back(std::move(layer));
  }
  return model;
}

absl::StatusOr<TinyOutput> TinyTransformer::Prefill(std::span<const uint32_t> tokens,
                                                    int64_t first_position,
                                                    bool rotate_explicitly) const {
  TinyKv empty;
  empty.keys.resize(static_cast<size_t>(config_.layers));
  empty.values.resize(static_cast<size_t>(config_.layers));
  return Extend(empty, tokens, first_position, rotate_explicitly);
}

absl::Status TinyTransformer::ValidateKv(const TinyKv& kv) const {
  const auto layers = static_cast<size_t>(config_.layers);
  if (kv.keys.size() != layers || kv.values.size() != layers) {
    return absl::InvalidArgumentError("tiny transformer: KV of another number of layers");
  }
  const auto rows = static_cast<size_t>(kv.num_tokens() * config_.kv_width());
  for (size_t l = 0; l < layers; ++l) {
    if (kv.keys[l].size() != rows || kv.values[l].size() != rows) {
      return absl::InvalidArgumentError("tiny transformer: KV of another shape");
    }
  }
  return absl::OkStatus();
}

void TinyTransformer::ProjectQkv(int64_t layer, const float* x, Workspace& ws, float* q, float* key,
                                 float* value) const {
  const Layer& w = layers_[static_cast<size_t>(layer)];
  const int64_t h = config_.hidden(), kvw = config_.kv_width();
  std::vector<float>& normed = ws.normed;
  RmsNorm(x, w.attn_norm, h, normed.data());
  MatVec(normed.data(), w.wq, h, h, q);
  MatVec(normed.data(), w.wk, h, kvw, key);
  MatVec(normed.data(), w.wv, h, kvw, value);
}

void TinyTransformer::AttentionAndMlpResidual(int64_t layer, const float* attn, Workspace& ws,
                                              float* x) const {
  const Layer& w = layers_[static_cast<size_t>(layer)];
  const int64_t h = config_.hidden(), ffn = config_.ffn_dim;
  std::vector<float>&normed = ws.normed, &projected = ws.projected, &gate = ws.gate, &up = ws.up;
  MatVec(attn, w.wo, h, h, projected.data());
  for (int64_t i = 0; i < h; ++i) x[i] += projected[i];
  RmsNorm(x, w.mlp_norm, h, normed.data());
  MatVec(normed.data(), w.w_gate, h, ffn, gate.data());
  MatVec(normed.data(), w.w_up, h, ffn, up.data());
  for (int64_t i = 0; i < ffn; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  MatVec(gate.data(), w.w_down, ffn, h, projected.data());
  for (int64_t i = 0; i < h; ++i) x[i] += projected[i];
}

absl::StatusOr<TinyOutput> TinyTransformer::Extend(const TinyKv& context,
                                                   std::span<const uint32_t> tokens,
                                                   int64_t first_position,
                                                   bool rotate_explicitly) const {
  const TinyConfig& c = config_;
  const int64_t h = c.hidden(), kvw = c.kv_width();
  const auto n = static_cast<int64_t>(tokens.size());
  STRATA_RETURN_IF_ERROR(ValidateKv(context));
  if (n == 0 || first_position < 0 || first_position + n > c.max_position) {
    return absl::InvalidArgumentError(
        fmt::format("tiny transformer: {} tokens from position {} (max {})", n, first_position,
                    c.max_position));
  }
  STRATA_RETURN_IF_ERROR(ValidateTokens(tokens, c.vocab));

  TinyOutput output;
  std::vector<float>& x = output.hidden;
  x = Embed(embedding_, tokens, h);
  output.kv.positions.resize(static_cast<size_t>(n));
  std::iota(output.kv.positions.begin(), output.kv.positions.end(), first_position);
  std::vector<int64_t> all_positions = context.positions;
  all_positions.insert(all_positions.end(), output.kv.positions.begin(), output.kv.positions.end());

  std::vector<float> q(static_cast<size_t>(n * h)), attn(static_cast<size_t>(n * h));
  Workspace ws(c);
  for (int64_t l = 0; l < c.layers; ++l) {
    std::vector<float> keys(static_cast<size_t>(n * kvw)), values(keys.size());
    for (int64_t t = 0; t < n; ++t) {
      ProjectQkv(l, x.data() + t * h, ws, q.data() + t * h, keys.data() + t * kvw,
                 values.data() + t * kvw);
    }
    // This layer's context followed by the new tokens.
    std::vector<float> all_keys = context.keys[l], all_values = context.values[l];
    all_keys.insert(all_keys.end(), keys.begin(), keys.end());
    all_values.insert(all_values.end(), values.begin(), values.end());
    STRATA_RETURN_IF_ERROR(Attend(q, std::move(all_keys), std::move(all_values), all_positions,
                                  output.kv.positions, rotate_explicitly, attn));
    for (int64_t t = 0; t < n; ++t)
      AttentionAndMlpResidual(l, attn.data() + t * h, ws, x.data() + t * h);
    output.kv.keys.push_back(std::move(keys));
    output.kv.values.push_back(std::move(values));
  }
  return output;
}

absl::StatusOr<TinySelectiveOutput> TinyTransformer::SelectivePrefill(
    std::span<const uint32_t> tokens, const TinyKv& cached, const TinyRecompute& recompute) const {
  const TinyConfig& c = config_;
  const int64_t h = c.hidden(), kvw = c.kv_width();
  const auto n = static_cast<int64_t>(tokens.size());
  STRATA_RETURN_IF_ERROR(ValidateKv(cached));
  STRATA_RETURN_IF_ERROR(ValidateTokens(tokens, c.vocab));
  const std::vector<int64_t>& positions = cached.positions;
  if (n == 0 || cached.num_tokens() != n ||
      !std::is_sorted(positions.begin(), positions.end(), std::less_equal<>()) ||
      positions.front() < 0 || positions.back() >= c.max_position) {
    return absl::InvalidArgumentError(fmt::format(
        "tiny transformer: {} tokens with a cache of {} at positions that do not increase inside "
        "[0, {})",
        n, cached.num_tokens(), c.max_position));
  }
  const std::vector<int32_t>& always = recompute.always;
  STRATA_RETURN_IF_ERROR(ValidateRecomputed(always, n));
  if (recompute.check_layer >= c.layers || recompute.ratio < 0 || recompute.ratio > 1) {
    return absl::InvalidArgumentError(
        fmt::format("tiny transformer: check layer {} of {}, ratio {}", recompute.check_layer,
                    c.layers, recompute.ratio));
  }

  // The tokens computed at the current layer, and their hidden rows.
  std::vector<int32_t> active = always;
  if (recompute.check_layer >= 0) {
    active.resize(static_cast<size_t>(n));
    std::iota(active.begin(), active.end(), 0);
  }
  std::vector<uint32_t> active_tokens;
  for (const int32_t t : active) active_tokens.push_back(tokens[t]);
  std::vector<float> x = Embed(embedding_, active_tokens, h);
  TinyKv kv = cached;
  Workspace ws(c);
  for (int64_t l = 0; l < c.layers; ++l) {
    const auto m = static_cast<int64_t>(active.size());
    std::vector<float> q(static_cast<size_t>(m * h)), keys(static_cast<size_t>(m * kvw));
    std::vector<float> values(keys.size());
    for (int64_t i = 0; i < m; ++i) {
      ProjectQkv(l, x.data() + i * h, ws, q.data() + i * h, keys.data() + i * kvw,
                 values.data() + i * kvw);
    }
    if (l == recompute.check_layer) {
      // CacheBlend: the tokens outside `always` that deviate most join it from here on.
      // Here `active` holds every token: row t is token t.
      std::vector<int32_t> others;
      for (const int32_t t : active) {
        if (!std::binary_search(always.begin(), always.end(), t)) others.push_back(t);
      }
      const std::vector<float> fresh = GatherRows(keys, kvw, others);
      const std::vector<float> old = GatherRows(kv.keys[l], kvw, others);
      const auto rows = static_cast<int64_t>(others.size());
      std::vector<float> deviation(others.size());
      STRATA_RETURN_IF_ERROR(kernels::TokenDeviation(
          kernels::ConstMatrixView::Dense(fresh.data(), KvDtype::kFloat32, rows, kvw),
          kernels::ConstMatrixView::Dense(old.data(), KvDtype::kFloat32, rows, kvw), deviation));
      STRATA_ASSIGN_OR_RETURN(std::vector<int32_t> chosen,
                              kernels::SelectBlendTokens(deviation, 0, recompute.ratio));
      std::vector<int32_t> selected = always;
      for (const int32_t i : chosen) selected.push_back(others[i]);
      std::sort(selected.begin(), selected.end());
      // Only the selected tokens' rows go on.
      x = GatherRows(x, h, selected);
      q = GatherRows(q, h, selected);
      keys = GatherRows(keys, kvw, selected);
      values = GatherRows(values, kvw, selected);
      active = std::move(selected);
    }
    // The recomputed tokens' fresh KV replaces their cached rows at this layer.
    for (size_t i = 0; i < active.size(); ++i) {
      std::copy_n(keys.begin() + i * kvw, kvw, kv.keys[l].begin() + active[i] * kvw);
      std::copy_n(values.begin() + i * kvw, kvw, kv.values[l].begin() + active[i] * kvw);
    }
    // Each run of consecutive recomputed tokens [a, b) attends causally over tokens [0, b).
    std::vector<float> attn(q.size());
    for (size_t i = 0; i < active.size();) {
      size_t j = i + 1;
      while (j < active.size() && active[j] == active[j - 1] + 1) ++j;
      const int64_t end = active[j - 1] + 1;
      std::vector<float> run_keys(kv.keys[l].begin(), kv.keys[l].begin() + end * kvw);
      std::vector<float> run_values(kv.values[l].begin(), kv.values[l].begin() + end * kvw);
      STRATA_RETURN_IF_ERROR(
          Attend(std::span(q).subspan(i * h, (j - i) * h), std::move(run_keys),
                 std::move(run_values), std::span(positions).first(static_cast<size_t>(end)),
                 std::span(positions).subspan(static_cast<size_t>(active[i]), j - i),
                 /*rotate_explicitly=*/false, std::span(attn).subspan(i * h, (j - i) * h)));
      i = j;
    }
    for (size_t i = 0; i < active.size(); ++i) {
      AttentionAndMlpResidual(l, attn.data() + i * h, ws, x.data() + i * h);
    }
  }
  return TinySelectiveOutput{
      .recomputed = std::move(active), .hidden = std::move(x), .kv = std::move(kv)};
}

absl::Status TinyTransformer::ValidatePagedCache(const TinyPagedCache& cache,
                                                 int64_t num_tokens) const {
  const TinyConfig& c = config_;
  const auto layers = static_cast<size_t>(c.layers);
  auto shaped = [&](const kernels::PagedKvSpec& spec) {
    return spec.dtype == KvDtype::kFloat32 && spec.num_planes == 2 &&
           spec.num_kv_heads == c.kv_heads && spec.head_dim == c.head_dim;
  };
  const bool shared = cache.shared_spec.num_blocks > 0;
  if (!shaped(cache.engine_spec) || cache.engine.size() != layers ||
      (shared && (!shaped(cache.shared_spec) || cache.shared.size() != layers))) {
    return absl::InvalidArgumentError("tiny transformer: a paged cache of another shape");
  }
  const int64_t block = cache.engine_spec.block_size;
  const bool covers =
      cache.block_positions.empty()
          ? static_cast<int64_t>(cache.block_table.size()) * block >= num_tokens
          : cache.block_positions.size() == cache.block_table.size() &&
                std::is_sorted(cache.block_positions.begin(), cache.block_positions.end());
  if (block <= 0 || !covers) {
    return absl::InvalidArgumentError(
        fmt::format("tiny transformer: a block table of {} blocks ({} positions) for {} tokens",
                    cache.block_table.size(), cache.block_positions.size(), num_tokens));
  }
  return absl::OkStatus();
}

absl::StatusOr<TinySelectiveOutput> TinyTransformer::PagedSelectivePrefill(
    std::span<const uint32_t> tokens, const TinyPagedCache& cache,
    std::span<const int32_t> recompute) const {
  const TinyConfig& c = config_;
  const int64_t h = c.hidden(), kvw = c.kv_width();
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0 || n > c.max_position) {
    return absl::InvalidArgumentError(fmt::format("tiny transformer: {} tokens", n));
  }
  STRATA_RETURN_IF_ERROR(ValidateTokens(tokens, c.vocab));
  STRATA_RETURN_IF_ERROR(ValidatePagedCache(cache, n));
  const kernels::PagedKvSpec& spec = cache.engine_spec;
  const int64_t block = spec.block_size;
  STRATA_RETURN_IF_ERROR(ValidateRecomputed(recompute, n));
  if (recompute.empty()) {
    return absl::InvalidArgumentError("tiny transformer: nothing to recompute");
  }
  // Each recomputed token's logical index in the table (its block's entry, its slot).
  std::vector<int64_t> logical;
  for (const int32_t t : recompute) {
    int64_t entry = t / block;
    if (!cache.block_positions.empty()) {
      const auto after =
          std::upper_bound(cache.block_positions.begin(), cache.block_positions.end(), int64_t{t});
      entry = after - cache.block_positions.begin() - 1;
      if (entry < 0 || t - cache.block_positions[static_cast<size_t>(entry)] >= block) {
        return absl::InvalidArgumentError(
            fmt::format("tiny transformer: recomputed token {} lies in no block of the table", t));
      }
    }
    const int32_t id = cache.block_table[static_cast<size_t>(entry)];
    if (id < 0 || id >= spec.num_blocks) {
      return absl::InvalidArgumentError(fmt::format(
          "tiny transformer: recomputed token {} lies in block id {}, not an engine block", t, id));
    }
    logical.push_back(entry * block + t % block);
  }

  // One sequence per run of consecutive recomputed tokens: its keys are the table's tokens up to
  // the run's end, its queries the run; every sequence shares the prompt's block table.
  std::vector<int32_t> seq_lens, query_start_loc = {0};
  for (size_t i = 0; i < recompute.size();) {
    size_t j = i + 1;
    while (j < recompute.size() && recompute[j] == recompute[j - 1] + 1) ++j;
    seq_lens.push_back(static_cast<int32_t>(logical[j - 1] + 1));
    query_start_loc.push_back(static_cast<int32_t>(j));
    i = j;
  }
  const auto max_blocks = static_cast<int64_t>(cache.block_table.size());
  std::vector<int32_t> block_table;
  std::vector<int64_t> block_positions;
  for (size_t s = 0; s < seq_lens.size(); ++s) {
    block_table.insert(block_table.end(), cache.block_table.begin(), cache.block_table.end());
    block_positions.insert(block_positions.end(), cache.block_positions.begin(),
                           cache.block_positions.end());
  }
  const std::vector<int64_t> query_positions(recompute.begin(), recompute.end());

  const auto m = static_cast<int64_t>(recompute.size());
  std::vector<uint32_t> active_tokens;
  for (const int32_t t : recompute) active_tokens.push_back(tokens[static_cast<size_t>(t)]);
  std::vector<float> x = Embed(embedding_, active_tokens, h);
  std::vector<float> q(static_cast<size_t>(m * h)), attn(q.size());
  std::vector<float> keys(static_cast<size_t>(m * kvw)), values(keys.size());
  Workspace ws(c);
  for (int64_t l = 0; l < c.layers; ++l) {
    const kernels::PagedKvLayer& engine = cache.engine[static_cast<size_t>(l)];
    for (int64_t i = 0; i < m; ++i) {
      ProjectQkv(l, x.data() + i * h, ws, q.data() + i * h, keys.data() + i * kvw,
                 values.data() + i * kvw);
      // Its rows into its engine block, head by head (the block's strides are the cache's).
      const int64_t index = logical[static_cast<size_t>(i)];
      const int64_t slot =
          spec.SlotOffset(cache.block_table[static_cast<size_t>(index / block)], index % block);
      for (int64_t head = 0; head < c.kv_heads; ++head) {
        const int64_t at = slot + head * spec.head_stride;
        const int64_t from = i * kvw + head * c.head_dim;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          static_cast<float*>(engine.planes[0])[at + d * spec.dim_stride] = keys[from + d];
          static_cast<float*>(engine.planes[1])[at + d * spec.dim_stride] = values[from + d];
        }
      }
    }
    kernels::PagedAttentionArgs args{
        .q = kernels::ConstHeadsView::Dense(q.data(), KvDtype::kFloat32, m, c.q_heads, c.head_dim),
        .out = kernels::HeadsView::Dense(attn.data(), KvDtype::kFloat32, m, c.q_heads, c.head_dim),
        .kv_spec = spec,
        .kv = engine,
        .block_table = block_table,
        .max_blocks_per_seq = max_blocks,
        .seq_lens = seq_lens,
        .query_start_loc = query_start_loc,
        .query_positions = query_positions,
        .block_positions = block_positions,
        .rope = rope_.view(),
        .causal = true};
    if (cache.shared_spec.num_blocks > 0) {
      args.shared_spec = cache.shared_spec;
      args.shared_kv = cache.shared[static_cast<size_t>(l)];
    }
    STRATA_RETURN_IF_ERROR(kernels::PagedAttention(args));
    for (int64_t i = 0; i < m; ++i) {
      AttentionAndMlpResidual(l, attn.data() + i * h, ws, x.data() + i * h);
    }
  }
  return TinySelectiveOutput{.recomputed = std::vector<int32_t>(recompute.begin(), recompute.end()),
                             .hidden = std::move(x)};
}

absl::Status TinyTransformer::Attend(std::span<const float> q, std::vector<float> keys,
                                     std::vector<float> values, std::span<const int64_t> positions,
                                     std::span<const int64_t> query_positions,
                                     bool rotate_explicitly, std::span<float> out) const {
  const TinyConfig& c = config_;
  const auto total = static_cast<int64_t>(positions.size());
  const auto n = static_cast<int64_t>(query_positions.size());
  std::vector<float> queries(q.begin(), q.end());
  kernels::RopeTableView rope = rope_.view();
  if (rotate_explicitly) {
    const auto q_view =
        kernels::HeadsView::Dense(queries.data(), KvDtype::kFloat32, n, c.q_heads, c.head_dim);
    STRATA_RETURN_IF_ERROR(kernels::ApplyRope(rope_, q_view, q_view, query_positions));
    const auto k_view =
        kernels::HeadsView::Dense(keys.data(), KvDtype::kFloat32, total, c.kv_heads, c.head_dim);
    STRATA_RETURN_IF_ERROR(kernels::ApplyRope(rope_, k_view, k_view, positions));
    rope = {};
  }
  // One token per block, so that each cached token has its own position.
  std::vector<int32_t> block_table(static_cast<size_t>(total));
  std::iota(block_table.begin(), block_table.end(), 0);
  const int32_t seq_lens[] = {static_cast<int32_t>(total)};
  const int32_t query_start_loc[] = {0, static_cast<int32_t>(n)};
  const int64_t extent = total * c.kv_width();
  kernels::PagedAttentionArgs args{
      .q = kernels::ConstHeadsView::Dense(queries.data(), KvDtype::kFloat32, n, c.q_heads,
                                          c.head_dim),
      .out = kernels::HeadsView::Dense(out.data(), KvDtype::kFloat32, n, c.q_heads, c.head_dim),
      .kv_spec =
          kernels::PagedKvSpec::Contiguous(KvDtype::kFloat32, 2, total, 1, c.kv_heads, c.head_dim),
      .kv = kernels::PagedKvLayer::FromSeparatePlanes(keys.data(), extent, values.data(), extent),
      .block_table = block_table,
      .max_blocks_per_seq = total,
      .seq_lens = seq_lens,
      .query_start_loc = query_start_loc,
      .query_positions = query_positions,
      .block_positions = positions,
      .rope = rope,
      .causal = true};
  return kernels::PagedAttention(args);
}

double RelativeDifference(std::span<const float> a, std::span<const float> b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

std::vector<uint32_t> RandomTokens(size_t n, uint64_t seed, uint32_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> tokens(n);
  for (uint32_t& t : tokens) t = 1 + static_cast<uint32_t>(rng() % (vocab - 1));
  return tokens;
}

std::span<const float> Rows(std::span<const float> m, int64_t width, int64_t begin, int64_t end) {
  return m.subspan(static_cast<size_t>(begin * width), static_cast<size_t>((end - begin) * width));
}

}  // namespace strata::testing
