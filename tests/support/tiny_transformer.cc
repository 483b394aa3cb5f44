#include "tests/support/tiny_transformer.h"

#include <cmath>
#include <numeric>
#include <random>
#include <utility>

#include "core/status_macros.h"
#include "fmt/format.h"
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

}  // namespace

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

absl::StatusOr<TinyOutput> TinyTransformer::Extend(const TinyKv& context,
                                                   std::span<const uint32_t> tokens,
                                                   int64_t first_position,
                                                   bool rotate_explicitly) const {
  const TinyConfig& c = config_;
  const int64_t h = c.hidden(), kvw = c.kv_width();
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t num_context = context.num_tokens();
  if (context.keys.size() != static_cast<size_t>(c.layers) ||
      context.values.size() != static_cast<size_t>(c.layers)) {
    return absl::InvalidArgumentError("tiny transformer: context of another number of layers");
  }
  for (int64_t l = 0; l < c.layers; ++l) {
    if (context.keys[l].size() != static_cast<size_t>(num_context * kvw) ||
        context.values[l].size() != static_cast<size_t>(num_context * kvw)) {
      return absl::InvalidArgumentError("tiny transformer: context KV of another shape");
    }
  }
  if (n == 0 || first_position < 0 || first_position + n > c.max_position) {
    return absl::InvalidArgumentError(
        fmt::format("tiny transformer: {} tokens from position {} (max {})", n, first_position,
                    c.max_position));
  }
  for (const uint32_t token : tokens) {
    if (token >= c.vocab) {
      return absl::InvalidArgumentError(fmt::format("tiny transformer: token {} >= vocab", token));
    }
  }

  TinyOutput output;
  std::vector<float>& x = output.hidden;
  x.resize(static_cast<size_t>(n * h));
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(embedding_.begin() + tokens[t] * h, h, x.begin() + t * h);
  }
  output.kv.positions.resize(static_cast<size_t>(n));
  std::iota(output.kv.positions.begin(), output.kv.positions.end(), first_position);
  std::vector<int64_t> all_positions = context.positions;
  all_positions.insert(all_positions.end(), output.kv.positions.begin(), output.kv.positions.end());

  std::vector<float> normed(static_cast<size_t>(h)), q(static_cast<size_t>(n * h));
  std::vector<float> attn(static_cast<size_t>(n * h)), projected(static_cast<size_t>(h));
  std::vector<float> gate(static_cast<size_t>(c.ffn_dim)), up(static_cast<size_t>(c.ffn_dim));
  for (int64_t l = 0; l < c.layers; ++l) {
    const Layer& w = layers_[static_cast<size_t>(l)];
    std::vector<float> keys(static_cast<size_t>(n * kvw)), values(keys.size());
    for (int64_t t = 0; t < n; ++t) {
      RmsNorm(x.data() + t * h, w.attn_norm, h, normed.data());
      MatVec(normed.data(), w.wq, h, h, q.data() + t * h);
      MatVec(normed.data(), w.wk, h, kvw, keys.data() + t * kvw);
      MatVec(normed.data(), w.wv, h, kvw, values.data() + t * kvw);
    }
    // This layer's context followed by the new tokens.
    std::vector<float> all_keys = context.keys[l], all_values = context.values[l];
    all_keys.insert(all_keys.end(), keys.begin(), keys.end());
    all_values.insert(all_values.end(), values.begin(), values.end());
    STRATA_RETURN_IF_ERROR(Attend(q, std::move(all_keys), std::move(all_values), all_positions,
                                  output.kv.positions, rotate_explicitly, attn));
    for (int64_t t = 0; t < n; ++t) {
      float* xt = x.data() + t * h;
      MatVec(attn.data() + t * h, w.wo, h, h, projected.data());
      for (int64_t i = 0; i < h; ++i) xt[i] += projected[i];
      RmsNorm(xt, w.mlp_norm, h, normed.data());
      MatVec(normed.data(), w.w_gate, h, c.ffn_dim, gate.data());
      MatVec(normed.data(), w.w_up, h, c.ffn_dim, up.data());
      for (int64_t i = 0; i < c.ffn_dim; ++i)
        gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
      MatVec(gate.data(), w.w_down, c.ffn_dim, h, projected.data());
      for (int64_t i = 0; i < h; ++i) xt[i] += projected[i];
    }
    output.kv.keys.push_back(std::move(keys));
    output.kv.values.push_back(std::move(values));
  }
  return output;
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

}  // namespace strata::testing
