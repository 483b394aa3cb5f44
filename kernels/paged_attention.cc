#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/dtype.h"
#include "kernels/internal/validate.h"

namespace strata::kernels {
namespace {

using internal::Invalid;

constexpr int64_t kMaxKvSplits = 1024;

float Dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  }
  float total = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

void Axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void Scale(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

// Rotates a float vector of head_dim (rotary dims only) by the angles of one table row.
void RotateRow(float* v, const RopeTableView& rope, int64_t position) {
  const int64_t half = rope.rotary_dim / 2;
  const float* cos = rope.cos_sin + position * rope.rotary_dim;
  const float* sin = cos + half;
  if (rope.style == RopeStyle::kNeox) {
    for (int64_t i = 0; i < half; ++i) internal::RotatePair(v[i], v[i + half], cos[i], sin[i]);
  } else {
    for (int64_t i = 0; i < half; ++i) {
      internal::RotatePair(v[2 * i], v[2 * i + 1], cos[i], sin[i]);
    }
  }
}

// Reads `count` slots of KV head `head` of physical block `block` of one plane into dst[count][D].
template <class T>
void LoadRows(const void* plane, const PagedKvSpec& spec, int64_t block, int64_t head,
              int64_t count, float* dst) {
  const int64_t dim = spec.head_dim;
  for (int64_t t = 0; t < count; ++t) {
    const T* src =
        static_cast<const T*>(plane) + spec.SlotOffset(block, t) + head * spec.head_stride;
    float* row = dst + t * dim;
    if (spec.dim_stride == 1) {
      for (int64_t d = 0; d < dim; ++d) row[d] = ToFloat(src[d]);
    } else {
      for (int64_t d = 0; d < dim; ++d) row[d] = ToFloat(src[d * spec.dim_stride]);
    }
  }
}

void LoadBlock(const void* plane, const PagedKvSpec& spec, int64_t block, int64_t head,
               int64_t count, float* dst) {
  DispatchFloatDtype(
      spec.dtype, [&](auto tag) { LoadRows<decltype(tag)>(plane, spec, block, head, count, dst); });
}

int64_t BlockPosition(const PagedAttentionArgs& a, int64_t seq, int64_t j) {
  if (a.block_positions.empty()) return j * a.kv_spec.block_size;
  return a.block_positions[static_cast<size_t>(seq * a.max_blocks_per_seq + j)];
}

// Online-softmax state of a set of query rows over a range of keys.
struct SoftmaxState {
  std::vector<float> m;    // running max
  std::vector<float> l;    // running sum of exp(score - m)
  std::vector<float> acc;  // running sum of exp(score - m) * V, [rows][D]

  void Reset(int64_t rows, int64_t dim) {
    m.assign(static_cast<size_t>(rows), -std::numeric_limits<float>::infinity());
    l.assign(static_cast<size_t>(rows), 0.0f);
    acc.assign(static_cast<size_t>(rows * dim), 0.0f);
  }
};

struct SeqWork {
  int64_t seq = 0;
  int64_t kv_head = 0;
  int64_t num_queries = 0;
  int64_t context = 0;  // logical index of the first query
  int64_t seq_len = 0;
};

// Processes blocks [block_begin, block_end) of one (sequence, KV head) for all its query rows.
void AttendBlocks(const PagedAttentionArgs& a, const SeqWork& w, int64_t group,
                  const std::vector<float>& q_rows, int64_t block_begin, int64_t block_end,
                  float scale, std::vector<float>& k_block, std::vector<float>& v_block,
                  std::vector<float>& scores, SoftmaxState& state) {
  const int64_t dim = a.kv_spec.head_dim;
  const int64_t block_size = a.kv_spec.block_size;
  const int64_t rows = w.num_queries * group;
  for (int64_t j = block_begin; j < block_end; ++j) {
    const int64_t first_key = j * block_size;
    const int64_t valid = std::min(block_size, w.seq_len - first_key);
    int64_t physical = a.block_table[static_cast<size_t>(w.seq * a.max_blocks_per_seq + j)];
    const bool shared = physical >= a.kv_spec.num_blocks;
    const PagedKvSpec& spec = shared ? a.shared_spec : a.kv_spec;
    const PagedKvLayer& cache = shared ? a.shared_kv : a.kv;
    if (shared) physical -= a.kv_spec.num_blocks;
    LoadBlock(cache.planes[0], spec, physical, w.kv_head, valid, k_block.data());
    LoadBlock(cache.planes[1], spec, physical, w.kv_head, valid, v_block.data());
    if (!a.rope.empty()) {
      const int64_t position = BlockPosition(a, w.seq, j);
      for (int64_t t = 0; t < valid; ++t) RotateRow(k_block.data() + t * dim, a.rope, position + t);
    }
    const uint8_t* masked =
        a.masked_keys.empty()
            ? nullptr
            : a.masked_keys.data() + w.seq * a.max_blocks_per_seq * block_size + first_key;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t query_index = w.context + r / group;
      const int64_t visible = a.causal ? std::min(valid, query_index - first_key + 1) : valid;
      if (visible <= 0) continue;
      const float* q = q_rows.data() + r * dim;
      float block_max = -std::numeric_limits<float>::infinity();
      for (int64_t t = 0; t < visible; ++t) {
        scores[static_cast<size_t>(t)] = masked != nullptr && masked[t] != 0
                                             ? -std::numeric_limits<float>::infinity()
                                             : scale * Dot(q, k_block.data() + t * dim, dim);
        block_max = std::max(block_max, scores[static_cast<size_t>(t)]);
      }
      if (block_max == -std::numeric_limits<float>::infinity()) continue;  // every key masked
      float& m = state.m[static_cast<size_t>(r)];
      float& l = state.l[static_cast<size_t>(r)];
      float* acc = state.acc.data() + r * dim;
      const float m_new = std::max(m, block_max);
      if (m_new > m) {
        const float correction = std::exp(m - m_new);
        l *= correction;
        Scale(acc, correction, dim);
        m = m_new;
      }
      for (int64_t t = 0; t < visible; ++t) {
        const float p = std::exp(scores[static_cast<size_t>(t)] - m);
        l += p;
        if (p != 0.0f) Axpy(acc, p, v_block.data() + t * dim, dim);  // as the CUDA kernel
      }
    }
  }
}

template <class T>
void LoadQueryRows(const PagedAttentionArgs& a, const SeqWork& w, int64_t group,
                   std::vector<float>& q_rows) {
  const int64_t dim = a.q.head_dim;
  const int64_t token0 = a.query_start_loc[static_cast<size_t>(w.seq)];
  for (int64_t i = 0; i < w.num_queries; ++i) {
    for (int64_t hh = 0; hh < group; ++hh) {
      const int64_t head = w.kv_head * group + hh;
      const T* src = static_cast<const T*>(a.q.data) + (token0 + i) * a.q.token_stride +
                     head * a.q.head_stride;
      float* row = q_rows.data() + (i * group + hh) * dim;
      for (int64_t d = 0; d < dim; ++d) row[d] = ToFloat(src[d]);
      if (!a.rope.empty()) {
        RotateRow(row, a.rope, a.query_positions[static_cast<size_t>(token0 + i)]);
      }
    }
  }
}

template <class T>
void StoreRow(const PagedAttentionArgs& a, int64_t token, int64_t head, const float* values) {
  T* dst = static_cast<T*>(a.out.data) + token * a.out.token_stride + head * a.out.head_stride;
  for (int64_t d = 0; d < a.out.head_dim; ++d) dst[d] = FromFloat<T>(values[d]);
}

}  // namespace

namespace internal {

absl::Status ValidatePagedAttentionShapes(const PagedAttentionArgs& a) {
  STRATA_RETURN_IF_ERROR(ValidateHeads(a.q, /*writable=*/false, "attention q"));
  STRATA_RETURN_IF_ERROR(ValidateHeads(a.out, /*writable=*/true, "attention out"));
  if (a.out.num_tokens != a.q.num_tokens || a.out.num_heads != a.q.num_heads ||
      a.out.head_dim != a.q.head_dim) {
    return Invalid("attention out", "shape differs from q");
  }
  STRATA_RETURN_IF_ERROR(a.kv_spec.Validate(/*writable=*/false));
  if (a.kv_spec.num_planes != 2) return Invalid("attention KV", "needs 2 planes (K and V)");
  if (a.kv_spec.head_dim != a.q.head_dim) {
    return Invalid("attention KV", fmt::format("head_dim {} differs from q's {}",
                                               a.kv_spec.head_dim, a.q.head_dim));
  }
  if (a.q.num_heads % a.kv_spec.num_kv_heads != 0) {
    return Invalid("attention", fmt::format("{} query heads are not a multiple of {} KV heads",
                                            a.q.num_heads, a.kv_spec.num_kv_heads));
  }
  const int64_t extent = a.kv_spec.PlaneExtentElems();
  for (int p = 0; p < 2; ++p) {
    const std::string what = fmt::format("attention KV plane {}", p);
    STRATA_RETURN_IF_ERROR(CheckNotNull(a.kv.planes[p], what));
    STRATA_RETURN_IF_ERROR(CheckExtent(extent - 1, a.kv.extent_elems[p], what));
  }
  if (a.shared_spec.num_blocks != 0) {
    const PagedKvSpec& shared = a.shared_spec;
    STRATA_RETURN_IF_ERROR(shared.Validate(/*writable=*/false));
    if (shared.dtype != a.kv_spec.dtype || shared.num_planes != 2 ||
        shared.block_size != a.kv_spec.block_size ||
        shared.num_kv_heads != a.kv_spec.num_kv_heads || shared.head_dim != a.kv_spec.head_dim ||
        shared.dim_stride != a.kv_spec.dim_stride) {
      return Invalid("attention shared KV",
                     "its dtype, planes, block_size, num_kv_heads, head_dim or dim_stride differ "
                     "from the engine's cache");
    }
    if (a.kv_spec.num_blocks + shared.num_blocks > INT32_MAX) {
      return Invalid("attention shared KV", "the block ids of both caches exceed int32");
    }
    const int64_t shared_extent = shared.PlaneExtentElems();
    for (int p = 0; p < 2; ++p) {
      const std::string what = fmt::format("attention shared KV plane {}", p);
      STRATA_RETURN_IF_ERROR(CheckNotNull(a.shared_kv.planes[p], what));
      STRATA_RETURN_IF_ERROR(CheckExtent(shared_extent - 1, a.shared_kv.extent_elems[p], what));
    }
  }
  const auto num_seqs = static_cast<int64_t>(a.seq_lens.size());
  STRATA_RETURN_IF_ERROR(CheckDim(num_seqs, "attention num_seqs"));
  STRATA_RETURN_IF_ERROR(CheckDim(a.max_blocks_per_seq, "attention max_blocks_per_seq"));
  STRATA_ASSIGN_OR_RETURN(const int64_t table_entries,
                          CheckedMul(num_seqs, a.max_blocks_per_seq, "attention block table"));
  STRATA_RETURN_IF_ERROR(
      CheckedMul(a.max_blocks_per_seq, a.kv_spec.block_size, "attention max tokens").status());
  if (a.max_blocks_per_seq * a.kv_spec.block_size > kMaxDim) {
    return Invalid("attention", "max_blocks_per_seq * block_size exceeds 2^31");
  }
  STRATA_RETURN_IF_ERROR(CheckSpanSize(a.block_table.size(), table_entries, "block_table"));
  STRATA_RETURN_IF_ERROR(CheckNotNull(a.block_table.data(), "block_table"));
  STRATA_RETURN_IF_ERROR(CheckNotNull(a.seq_lens.data(), "seq_lens"));
  STRATA_RETURN_IF_ERROR(CheckSpanSize(a.query_start_loc.size(), num_seqs + 1, "query_start_loc"));
  STRATA_RETURN_IF_ERROR(CheckNotNull(a.query_start_loc.data(), "query_start_loc"));
  if (!a.block_positions.empty()) {
    STRATA_RETURN_IF_ERROR(
        CheckSpanSize(a.block_positions.size(), table_entries, "block_positions"));
  }
  if (!a.masked_keys.empty()) {
    STRATA_RETURN_IF_ERROR(
        CheckSpanSize(a.masked_keys.size(), table_entries * a.kv_spec.block_size, "masked_keys"));
  }
  if (!a.rope.empty()) {
    STRATA_RETURN_IF_ERROR(ValidateRopeTableView(a.rope, "attention rope"));
    if (a.rope.rotary_dim > a.q.head_dim) {
      return Invalid("attention rope", fmt::format("rotary_dim {} exceeds head_dim {}",
                                                   a.rope.rotary_dim, a.q.head_dim));
    }
    STRATA_RETURN_IF_ERROR(
        CheckSpanSize(a.query_positions.size(), a.q.num_tokens, "query_positions"));
    STRATA_RETURN_IF_ERROR(CheckNotNull(a.query_positions.data(), "query_positions"));
  }
  if (!std::isfinite(a.scale) || a.scale < 0) {
    return Invalid("attention", fmt::format("scale {} is not finite and >= 0", a.scale));
  }
  if (a.max_query_len < 0 || a.max_query_len > kMaxDim) {
    return Invalid("attention", fmt::format("max_query_len {} outside [0, 2^31]", a.max_query_len));
  }
  if (a.num_kv_splits < 1 || a.num_kv_splits > kMaxKvSplits) {
    return Invalid("attention",
                   fmt::format("num_kv_splits {} outside [1, {}]", a.num_kv_splits, kMaxKvSplits));
  }
  return absl::OkStatus();
}

absl::Status ValidatePagedAttentionValues(const PagedAttentionArgs& a) {
  const auto num_seqs = static_cast<int64_t>(a.seq_lens.size());
  const int64_t block_size = a.kv_spec.block_size;
  if (a.query_start_loc[0] != 0 ||
      a.query_start_loc[static_cast<size_t>(num_seqs)] != a.q.num_tokens) {
    return Invalid("query_start_loc",
                   fmt::format("must run from 0 to num_query_tokens {}", a.q.num_tokens));
  }
  for (int64_t s = 0; s < num_seqs; ++s) {
    if (a.query_start_loc[static_cast<size_t>(s + 1)] < a.query_start_loc[static_cast<size_t>(s)]) {
      return Invalid("query_start_loc", fmt::format("decreases at sequence {}", s));
    }
  }
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t begin = a.query_start_loc[static_cast<size_t>(s)];
    const int64_t end = a.query_start_loc[static_cast<size_t>(s + 1)];
    const int64_t seq_len = a.seq_lens[static_cast<size_t>(s)];
    if (a.max_query_len > 0 && end - begin > a.max_query_len) {
      return Invalid("query_start_loc", fmt::format("sequence {} has {} queries, above "
                                                    "max_query_len {}",
                                                    s, end - begin, a.max_query_len));
    }
    if (seq_len < end - begin || seq_len > a.max_blocks_per_seq * block_size) {
      return Invalid("seq_lens",
                     fmt::format("sequence {} has {} keys for {} queries and room for "
                                 "{}",
                                 s, seq_len, end - begin, a.max_blocks_per_seq * block_size));
    }
    if (end == begin) continue;  // no queries: the sequence is never read
    const int64_t blocks = (seq_len + block_size - 1) / block_size;
    for (int64_t j = 0; j < blocks; ++j) {
      const int64_t block = a.block_table[static_cast<size_t>(s * a.max_blocks_per_seq + j)];
      const int64_t num_blocks = a.kv_spec.num_blocks + a.shared_spec.num_blocks;
      if (block < 0 || block >= num_blocks) {
        return Invalid("block_table", fmt::format("sequence {} block {} is id {}, outside [0, {})",
                                                  s, j, block, num_blocks));
      }
      if (!a.rope.empty()) {
        const int64_t first = BlockPosition(a, s, j);
        const int64_t last = first + std::min(block_size, seq_len - j * block_size) - 1;
        if (first < 0 || last >= a.rope.max_position) {
          return Invalid("block_positions",
                         fmt::format("sequence {} block {} covers positions [{}, {}], outside the "
                                     "RoPE table [0, {})",
                                     s, j, first, last, a.rope.max_position));
        }
      }
    }
    if (!a.rope.empty()) {
      for (int64_t t = begin; t < end; ++t) {
        const int64_t p = a.query_positions[static_cast<size_t>(t)];
        if (p < 0 || p >= a.rope.max_position) {
          return Invalid("query_positions", fmt::format("position {} of query {} is outside the "
                                                        "RoPE table [0, {})",
                                                        p, t, a.rope.max_position));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status PagedAttention(const PagedAttentionArgs& a) {
  STRATA_RETURN_IF_ERROR(internal::ValidatePagedAttentionShapes(a));
  STRATA_RETURN_IF_ERROR(internal::ValidatePagedAttentionValues(a));
  const int64_t dim = a.q.head_dim;
  const int64_t block_size = a.kv_spec.block_size;
  const int64_t group = a.q.num_heads / a.kv_spec.num_kv_heads;
  const float scale = a.scale > 0 ? a.scale : 1.0f / std::sqrt(static_cast<float>(dim));
  const auto splits = a.num_kv_splits;

  std::vector<float> k_block(static_cast<size_t>(block_size * dim));
  std::vector<float> v_block(static_cast<size_t>(block_size * dim));
  std::vector<float> scores(static_cast<size_t>(block_size));
  std::vector<float> q_rows;
  std::vector<SoftmaxState> partials(static_cast<size_t>(splits));
  std::vector<float> out_row(static_cast<size_t>(dim));

  for (int64_t s = 0; s < static_cast<int64_t>(a.seq_lens.size()); ++s) {
    SeqWork w;
    w.seq = s;
    w.num_queries =
        a.query_start_loc[static_cast<size_t>(s + 1)] - a.query_start_loc[static_cast<size_t>(s)];
    if (w.num_queries == 0) continue;
    w.seq_len = a.seq_lens[static_cast<size_t>(s)];
    w.context = w.seq_len - w.num_queries;
    const int64_t rows = w.num_queries * group;
    const int64_t blocks = (w.seq_len + block_size - 1) / block_size;
    q_rows.resize(static_cast<size_t>(rows * dim));
    for (w.kv_head = 0; w.kv_head < a.kv_spec.num_kv_heads; ++w.kv_head) {
      DispatchFloatDtype(a.q.dtype,
                         [&](auto tag) { LoadQueryRows<decltype(tag)>(a, w, group, q_rows); });
      for (int64_t k = 0; k < splits; ++k) {
        SoftmaxState& state = partials[static_cast<size_t>(k)];
        state.Reset(rows, dim);
        AttendBlocks(a, w, group, q_rows, blocks * k / splits, blocks * (k + 1) / splits, scale,
                     k_block, v_block, scores, state);
      }
      // Merge the splits' partial states by log-sum-exp and normalise.
      const int64_t token0 = a.query_start_loc[static_cast<size_t>(s)];
      for (int64_t r = 0; r < rows; ++r) {
        float m = -std::numeric_limits<float>::infinity();
        for (const SoftmaxState& p : partials) m = std::max(m, p.m[static_cast<size_t>(r)]);
        float l = 0.0f;
        std::fill(out_row.begin(), out_row.end(), 0.0f);
        for (const SoftmaxState& p : partials) {
          if (p.l[static_cast<size_t>(r)] == 0.0f) continue;
          const float w_split = std::exp(p.m[static_cast<size_t>(r)] - m);
          l += p.l[static_cast<size_t>(r)] * w_split;
          Axpy(out_row.data(), w_split, p.acc.data() + r * dim, dim);
        }
        Scale(out_row.data(), l > 0 ? 1.0f / l : 0.0f, dim);
        const int64_t token = token0 + r / group;
        const int64_t head = w.kv_head * group + r % group;
        DispatchFloatDtype(a.out.dtype, [&](auto tag) {
          StoreRow<decltype(tag)>(a, token, head, out_row.data());
        });
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::kernels
