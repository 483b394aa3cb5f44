#include "kernels/cuda/page_scores.h"

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/topk.cuh"
#include "kernels/internal/validate.h"

namespace strata::kernels::cuda {
namespace {

struct SummaryParams {
  const void* keys;
  int64_t num_blocks, block_size, block_stride, slot_stride, head_stride, dim_stride;
  int64_t heads, dim;
  const int32_t* page_ids;
  const int32_t* page_tokens;
  const float* cos_sin;  // null: no in-block rotation
  int64_t rotary_dim;
  int neox;
  float* summaries;
  uint32_t* error_flags;
};

template <class T>
__global__ void SummaryKernel(SummaryParams p) {
  const int64_t page = blockIdx.x;
  const int64_t head = blockIdx.y;
  float* lo = p.summaries + (page * p.heads + head) * 2 * p.dim;
  float* hi = lo + p.dim;
  const int64_t block = p.page_ids[page];
  const int64_t tokens = p.page_tokens[page];
  if (block < 0 || block >= p.num_blocks || tokens < 1 || tokens > p.block_size) {
    if (threadIdx.x == 0) {
      internal::ReportError(p.error_flags, block < 0 || block >= p.num_blocks
                                               ? kDeviceErrorBlockId
                                               : kDeviceErrorPageTokens);
    }
    for (int64_t d = threadIdx.x; d < 2 * p.dim; d += blockDim.x) lo[d] = NAN;
    return;
  }
  const T* base = static_cast<const T*>(p.keys) + block * p.block_stride + head * p.head_stride;
  const int64_t half = p.cos_sin != nullptr ? p.rotary_dim / 2 : 0;
  const int64_t items = half + (p.dim - 2 * half);
  for (int64_t j = threadIdx.x; j < items; j += blockDim.x) {
    if (j < half) {
      const int64_t a = p.neox ? j : 2 * j;
      const int64_t b = p.neox ? j + half : 2 * j + 1;
      float lo_a = INFINITY, hi_a = -INFINITY, lo_b = INFINITY, hi_b = -INFINITY;
      for (int64_t t = 0; t < tokens; ++t) {
        const T* key = base + t * p.slot_stride;
        const float x = internal::ToF32(key[a * p.dim_stride]);
        const float y = internal::ToF32(key[b * p.dim_stride]);
        const float* row = p.cos_sin + t * p.rotary_dim;
        const float c = row[j], s = row[half + j];
        const float xa = x * c - y * s;
        const float yb = y * c + x * s;
        lo_a = fminf(lo_a, xa);
        hi_a = fmaxf(hi_a, xa);
        lo_b = fminf(lo_b, yb);
        hi_b = fmaxf(hi_b, yb);
      }
      lo[a] = lo_a;
      hi[a] = hi_a;
      lo[b] = lo_b;
      hi[b] = hi_b;
    } else {
      const int64_t d = 2 * half + (j - half);
      float l = INFINITY, h = -INFINITY;
      for (int64_t t = 0; t < tokens; ++t) {
        const float v = internal::ToF32(base[t * p.slot_stride + d * p.dim_stride]);
        l = fminf(l, v);
        h = fmaxf(h, v);
      }
      lo[d] = l;
      hi[d] = h;
    }
  }
}

struct ScoreParams {
  const void* q;
  int q_dtype;
  int64_t q_head_stride;
  int64_t group, kv_heads, dim, num_pages;
  const float* summaries;
  int combine_max;
  const float* cos_sin;  // null: q already rotated
  int64_t max_position, rotary_dim;
  int neox;
  int64_t query_position;
  const int64_t* page_positions;
  float* scores;
  uint32_t* error_flags;
};

// One warp per (page, KV head).
__global__ void ScoreKernel(ScoreParams p) {
  const int64_t page = blockIdx.x;
  const int64_t kv_head = blockIdx.y;
  const int lane = threadIdx.x;
  const float* lo = p.summaries + (page * p.kv_heads + kv_head) * 2 * p.dim;
  const float* hi = lo + p.dim;
  float* score_out = p.scores + kv_head * p.num_pages + page;
  int64_t half = 0;
  const float* row = nullptr;
  float sign = 1.0f;
  if (p.cos_sin != nullptr) {
    const int64_t delta = p.query_position - p.page_positions[page];
    if (delta <= -p.max_position || delta >= p.max_position) {
      if (lane == 0) {
        internal::ReportError(p.error_flags, kDeviceErrorPosition);
        *score_out = NAN;
      }
      return;
    }
    half = p.rotary_dim / 2;
    row = p.cos_sin + (delta < 0 ? -delta : delta) * p.rotary_dim;
    sign = delta < 0 ? -1.0f : 1.0f;
  }
  float combined = 0.0f;
  for (int64_t hh = 0; hh < p.group; ++hh) {
    const int64_t q0 = (kv_head * p.group + hh) * p.q_head_stride;
    float s = 0.0f;
    for (int64_t i = lane; i < half; i += 32) {
      const int64_t a = p.neox ? i : 2 * i;
      const int64_t b = p.neox ? i + half : 2 * i + 1;
      const float x = internal::LoadAny(p.q, p.q_dtype, q0 + a);
      const float y = internal::LoadAny(p.q, p.q_dtype, q0 + b);
      const float c = row[i], sn = sign * row[half + i];
      const float qa = x * c - y * sn;
      const float qb = y * c + x * sn;
      s += fmaxf(qa * hi[a], qa * lo[a]) + fmaxf(qb * hi[b], qb * lo[b]);
    }
    for (int64_t d = 2 * half + lane; d < p.dim; d += 32) {
      const float x = internal::LoadAny(p.q, p.q_dtype, q0 + d);
      s += fmaxf(x * hi[d], x * lo[d]);
    }
    s = internal::WarpSum(s);
    combined = hh == 0 ? s : (p.combine_max ? fmaxf(combined, s) : combined + s);
  }
  if (lane == 0) *score_out = combined;
}

}  // namespace

absl::Status BuildPageSummaries(const PageSummaryArgs& a, const LaunchOptions& options) {
  if (absl::Status s = kernels::internal::ValidatePageSummaryShapes(a); !s.ok()) return s;
  if (a.kv_spec.num_kv_heads > 65535) {
    return kernels::internal::Invalid("page summaries", "more than 65535 KV heads");
  }
  SummaryParams p{a.kv.planes[0],
                  a.kv_spec.num_blocks,
                  a.kv_spec.block_size,
                  a.kv_spec.block_stride,
                  a.kv_spec.slot_stride,
                  a.kv_spec.head_stride,
                  a.kv_spec.dim_stride,
                  a.kv_spec.num_kv_heads,
                  a.kv_spec.head_dim,
                  a.page_ids.data(),
                  a.page_tokens.data(),
                  a.in_block_rope.cos_sin,
                  a.in_block_rope.rotary_dim,
                  a.in_block_rope.style == RopeStyle::kNeox,
                  a.summaries.data(),
                  options.error_flags};
  const dim3 grid(static_cast<unsigned>(a.page_ids.size()),
                  static_cast<unsigned>(a.kv_spec.num_kv_heads));
  const int threads = static_cast<int>(std::clamp<int64_t>(a.kv_spec.head_dim, 32, 128));
  internal::DispatchDtype(a.kv_spec.dtype, [&](auto tag) {
    SummaryKernel<decltype(tag)><<<grid, threads, 0, options.stream>>>(p);
  });
  return internal::LaunchStatus("page summaries");
}

absl::Status ScorePages(const PageScoreArgs& a, const LaunchOptions& options) {
  if (absl::Status s = kernels::internal::ValidatePageScoreShapes(a); !s.ok()) return s;
  if (a.num_kv_heads > 65535) {
    return kernels::internal::Invalid("page scores", "more than 65535 KV heads");
  }
  ScoreParams p{a.q.data,
                static_cast<int>(a.q.dtype),
                a.q.head_stride,
                a.q.num_heads / a.num_kv_heads,
                a.num_kv_heads,
                a.q.head_dim,
                a.num_pages,
                a.summaries.data(),
                a.combine == GqaCombine::kMax,
                a.rope.cos_sin,
                a.rope.max_position,
                a.rope.rotary_dim,
                a.rope.style == RopeStyle::kNeox,
                a.query_position,
                a.page_positions.data(),
                a.scores.data(),
                options.error_flags};
  const dim3 grid(static_cast<unsigned>(a.num_pages), static_cast<unsigned>(a.num_kv_heads));
  ScoreKernel<<<grid, 32, 0, options.stream>>>(p);
  return internal::LaunchStatus("page scores");
}

absl::Status SelectTopPages(std::span<const float> scores, int64_t num_kv_heads, int64_t num_pages,
                            int64_t budget_pages, bool keep_last_page, std::span<int32_t> selected,
                            const LaunchOptions& options) {
  if (absl::Status s = kernels::internal::ValidateSelectTopPages(
          scores.size(), num_kv_heads, num_pages, budget_pages, selected.size());
      !s.ok()) {
    return s;
  }
  if (num_kv_heads > INT32_MAX) return kernels::internal::Invalid("select", "too many heads");
  const int64_t keep = std::min(budget_pages, num_pages);
  const int64_t candidates = keep_last_page ? num_pages - 1 : num_pages;
  const int64_t k = keep_last_page ? keep - 1 : keep;
  internal::SelectTopKKernel<<<static_cast<unsigned>(num_kv_heads), internal::kTopKThreads, 0,
                               options.stream>>>(scores.data(), num_pages, candidates, k,
                                                 selected.data(), keep, num_pages - 1,
                                                 keep_last_page ? 1 : 0);
  return internal::LaunchStatus("select top pages");
}

}  // namespace strata::kernels::cuda
