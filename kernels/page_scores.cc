#include "kernels/page_scores.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/dtype.h"
#include "kernels/internal/validate.h"
#include "kernels/topk.h"

namespace strata::kernels {
namespace {

using internal::Invalid;

// Rotates v (fp32, rotary dims) by `delta` positions, which may be negative: R(-d) = R(d)^T.
void RotateByDelta(float* v, const RopeTableView& rope, int64_t delta) {
  const int64_t half = rope.rotary_dim / 2;
  const int64_t row = delta < 0 ? -delta : delta;
  const float* cos = rope.cos_sin + row * rope.rotary_dim;
  const float* sin = cos + half;
  const float sign = delta < 0 ? -1.0f : 1.0f;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = rope.style == RopeStyle::kNeox ? i : 2 * i;
    const int64_t b = rope.style == RopeStyle::kNeox ? i + half : 2 * i + 1;
    internal::RotatePair(v[a], v[b], cos[i], sign * sin[i]);
  }
}

}  // namespace

namespace internal {

absl::Status ValidatePageSummaryShapes(const PageSummaryArgs& a) {
  STRATA_RETURN_IF_ERROR(a.kv_spec.Validate(/*writable=*/false));
  STRATA_RETURN_IF_ERROR(CheckNotNull(a.kv.planes[0], "page summary keys"));
  STRATA_RETURN_IF_ERROR(
      CheckExtent(a.kv_spec.PlaneExtentElems() - 1, a.kv.extent_elems[0], "page summary keys"));
  const auto pages = static_cast<int64_t>(a.page_ids.size());
  STRATA_RETURN_IF_ERROR(CheckDim(pages, "page summary num_pages"));
  STRATA_RETURN_IF_ERROR(CheckSpanSize(a.page_tokens.size(), pages, "page_tokens"));
  STRATA_ASSIGN_OR_RETURN(const int64_t per_page,
                          CheckedMul(a.kv_spec.num_kv_heads, 2 * a.kv_spec.head_dim, "summaries"));
  STRATA_ASSIGN_OR_RETURN(const int64_t total, CheckedMul(pages, per_page, "summaries"));
  STRATA_RETURN_IF_ERROR(CheckSpanSize(a.summaries.size(), total, "summaries"));
  STRATA_RETURN_IF_ERROR(CheckNotNull(a.page_ids.data(), "page_ids"));
  STRATA_RETURN_IF_ERROR(CheckNotNull(a.page_tokens.data(), "page_tokens"));
  STRATA_RETURN_IF_ERROR(CheckNotNull(a.summaries.data(), "summaries"));
  if (!a.in_block_rope.empty()) {
    STRATA_RETURN_IF_ERROR(ValidateRopeTableView(a.in_block_rope, "page summary rope"));
    if (a.in_block_rope.rotary_dim > a.kv_spec.head_dim ||
        a.in_block_rope.max_position < a.kv_spec.block_size) {
      return Invalid("page summary rope",
                     "rotary_dim exceeds head_dim or table shorter than a "
                     "block");
    }
  }
  return absl::OkStatus();
}

absl::Status ValidatePageScoreShapes(const PageScoreArgs& a) {
  STRATA_RETURN_IF_ERROR(ValidateHeads(a.q, /*writable=*/false, "page score q"));
  if (a.q.num_tokens != 1) return Invalid("page score q", "must hold exactly one token");
  STRATA_RETURN_IF_ERROR(CheckDim(a.num_pages, "page score num_pages"));
  STRATA_RETURN_IF_ERROR(CheckDim(a.num_kv_heads, "page score num_kv_heads"));
  if (a.q.num_heads % a.num_kv_heads != 0) {
    return Invalid("page score", "query heads are not a multiple of KV heads");
  }
  if (a.combine != GqaCombine::kSum && a.combine != GqaCombine::kMax) {
    return Invalid("page score", "unknown GQA combine");
  }
  STRATA_ASSIGN_OR_RETURN(const int64_t per_page,
                          CheckedMul(a.num_kv_heads, 2 * a.q.head_dim, "summaries"));
  STRATA_ASSIGN_OR_RETURN(const int64_t total, CheckedMul(a.num_pages, per_page, "summaries"));
  STRATA_RETURN_IF_ERROR(CheckSpanSize(a.summaries.size(), total, "summaries"));
  STRATA_RETURN_IF_ERROR(
      CheckSpanSize(a.scores.size(), a.num_kv_heads * a.num_pages, "page scores"));
  STRATA_RETURN_IF_ERROR(CheckNotNull(a.summaries.data(), "summaries"));
  STRATA_RETURN_IF_ERROR(CheckNotNull(a.scores.data(), "page scores"));
  if (!a.rope.empty()) {
    STRATA_RETURN_IF_ERROR(ValidateRopeTableView(a.rope, "page score rope"));
    if (a.rope.rotary_dim > a.q.head_dim) {
      return Invalid("page score rope", "rotary_dim exceeds head_dim");
    }
    STRATA_RETURN_IF_ERROR(CheckSpanSize(a.page_positions.size(), a.num_pages, "page_positions"));
    STRATA_RETURN_IF_ERROR(CheckNotNull(a.page_positions.data(), "page_positions"));
    if (a.query_position < 0 || a.query_position >= a.rope.max_position) {
      return Invalid("page score", fmt::format("query position {} outside [0, {})",
                                               a.query_position, a.rope.max_position));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSelectTopPages(size_t num_scores, int64_t num_kv_heads, int64_t num_pages,
                                    int64_t budget_pages, size_t num_selected) {
  STRATA_RETURN_IF_ERROR(CheckDim(num_kv_heads, "select num_kv_heads"));
  STRATA_RETURN_IF_ERROR(CheckDim(num_pages, "select num_pages"));
  STRATA_RETURN_IF_ERROR(CheckDim(budget_pages, "select budget_pages"));
  STRATA_ASSIGN_OR_RETURN(const int64_t total,
                          CheckedMul(num_kv_heads, num_pages, "select scores"));
  STRATA_RETURN_IF_ERROR(CheckSpanSize(num_scores, total, "select scores"));
  return CheckSpanSize(num_selected, num_kv_heads * std::min(budget_pages, num_pages),
                       "selected pages");
}

}  // namespace internal

absl::Status BuildPageSummaries(const PageSummaryArgs& a) {
  STRATA_RETURN_IF_ERROR(internal::ValidatePageSummaryShapes(a));
  const PagedKvSpec& spec = a.kv_spec;
  for (size_t p = 0; p < a.page_ids.size(); ++p) {
    if (a.page_ids[p] < 0 || a.page_ids[p] >= spec.num_blocks) {
      return Invalid("page_ids", fmt::format("page {} is block {}, outside [0, {})", p,
                                             a.page_ids[p], spec.num_blocks));
    }
    if (a.page_tokens[p] < 1 || a.page_tokens[p] > spec.block_size) {
      return Invalid("page_tokens", fmt::format("page {} has {} tokens, outside [1, {}]", p,
                                                a.page_tokens[p], spec.block_size));
    }
  }
  const int64_t dim = spec.head_dim;
  std::vector<float> key(static_cast<size_t>(dim));
  DispatchFloatDtype(spec.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (size_t p = 0; p < a.page_ids.size(); ++p) {
      for (int64_t h = 0; h < spec.num_kv_heads; ++h) {
        float* lo =
            a.summaries.data() + (static_cast<int64_t>(p) * spec.num_kv_heads + h) * 2 * dim;
        float* hi = lo + dim;
        std::fill(lo, lo + dim, std::numeric_limits<float>::infinity());
        std::fill(hi, hi + dim, -std::numeric_limits<float>::infinity());
        for (int64_t t = 0; t < a.page_tokens[p]; ++t) {
          const T* src = static_cast<const T*>(a.kv.planes[0]) + spec.SlotOffset(a.page_ids[p], t) +
                         h * spec.head_stride;
          for (int64_t d = 0; d < dim; ++d) key[d] = ToFloat(src[d * spec.dim_stride]);
          if (!a.in_block_rope.empty()) RotateByDelta(key.data(), a.in_block_rope, t);
          for (int64_t d = 0; d < dim; ++d) {
            lo[d] = std::min(lo[d], key[d]);
            hi[d] = std::max(hi[d], key[d]);
          }
        }
      }
    }
  });
  return absl::OkStatus();
}

absl::Status ScorePages(const PageScoreArgs& a) {
  STRATA_RETURN_IF_ERROR(internal::ValidatePageScoreShapes(a));
  if (!a.rope.empty()) {
    for (int64_t j = 0; j < a.num_pages; ++j) {
      const int64_t delta = a.query_position - a.page_positions[static_cast<size_t>(j)];
      if (delta <= -a.rope.max_position || delta >= a.rope.max_position) {
        return Invalid(
            "page_positions",
            fmt::format("page {} at position {} is {} away from the query, beyond the "
                        "table's {}",
                        j, a.page_positions[static_cast<size_t>(j)], delta, a.rope.max_position));
      }
    }
  }
  const int64_t dim = a.q.head_dim;
  const int64_t group = a.q.num_heads / a.num_kv_heads;
  std::vector<float> q(static_cast<size_t>(a.q.num_heads * dim));
  DispatchFloatDtype(a.q.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t h = 0; h < a.q.num_heads; ++h) {
      const T* src = static_cast<const T*>(a.q.data) + h * a.q.head_stride;
      for (int64_t d = 0; d < dim; ++d) q[static_cast<size_t>(h * dim + d)] = ToFloat(src[d]);
    }
  });
  std::vector<float> rotated(static_cast<size_t>(dim));
  for (int64_t j = 0; j < a.num_pages; ++j) {
    for (int64_t g = 0; g < a.num_kv_heads; ++g) {
      const float* lo = a.summaries.data() + (j * a.num_kv_heads + g) * 2 * dim;
      const float* hi = lo + dim;
      float combined = 0.0f;
      for (int64_t hh = 0; hh < group; ++hh) {
        const float* qh = q.data() + (g * group + hh) * dim;
        if (!a.rope.empty()) {
          std::copy(qh, qh + dim, rotated.begin());
          RotateByDelta(rotated.data(), a.rope,
                        a.query_position - a.page_positions[static_cast<size_t>(j)]);
          qh = rotated.data();
        }
        float s = 0.0f;
        for (int64_t d = 0; d < dim; ++d) s += std::max(qh[d] * hi[d], qh[d] * lo[d]);
        combined =
            hh == 0 ? s : (a.combine == GqaCombine::kSum ? combined + s : std::max(combined, s));
      }
      a.scores[static_cast<size_t>(g * a.num_pages + j)] = combined;
    }
  }
  return absl::OkStatus();
}

absl::Status SelectTopPages(std::span<const float> scores, int64_t num_kv_heads, int64_t num_pages,
                            int64_t budget_pages, bool keep_last_page,
                            std::span<int32_t> selected) {
  STRATA_RETURN_IF_ERROR(internal::ValidateSelectTopPages(scores.size(), num_kv_heads, num_pages,
                                                          budget_pages, selected.size()));
  const int64_t keep = std::min(budget_pages, num_pages);
  for (int64_t g = 0; g < num_kv_heads; ++g) {
    std::span<const float> head =
        scores.subspan(static_cast<size_t>(g * num_pages), static_cast<size_t>(num_pages));
    std::vector<int32_t> chosen = keep_last_page
                                      ? TopKIndices(head.first(head.size() - 1), keep - 1)
                                      : TopKIndices(head, keep);
    if (keep_last_page) chosen.push_back(static_cast<int32_t>(num_pages - 1));
    std::copy(chosen.begin(), chosen.end(), selected.begin() + g * keep);
  }
  return absl::OkStatus();
}

}  // namespace strata::kernels
