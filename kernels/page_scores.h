// Page summaries, page scores and top-K page selection (Quest / FlexiCache; ALGORITHMS.md
// section 4): CPU reference.
//
// A page summary holds, for each KV head, the per-dimension minimum and maximum of the page's keys:
// summaries[page][kv_head][0][d] = min_t K[t][d], [..][1][d] = max_t K[t][d], over the page's valid
// tokens only. The score of a page for a query q is the upper bound
//   s = sum_d max(q_d * kmax_d, q_d * kmin_d)  >=  max_t q . k_t,
// combined over the query heads of a GQA group by sum or max.
//
// NoPE pages (MEPIC canonical pages, whose keys carry no position): summaries are built over
// RoPE(k_t, t), the keys rotated by their slot in the page, which does not depend on where the page
// is used; a query q (before RoPE) at position p_q is scored against page j at position P_j with
// RoPE(q, p_q - P_j). The bound stays exact: RoPE(q, p_q) . RoPE(k_t, P_j + t) =
// RoPE(q, p_q - P_j) . RoPE(k_t, t).
// Pure functions over caller-owned buffers; thread-safe when outputs are not shared.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/kv_transfer.h"
#include "kernels/rope.h"
#include "kernels/tensor_view.h"

namespace strata::kernels {

struct PageSummaryArgs {
  PagedKvSpec kv_spec;  // keys are plane 0
  PagedKvLayer kv;
  std::span<const int32_t> page_ids;     // physical blocks to summarise
  std::span<const int32_t> page_tokens;  // valid tokens of each page, in [1, block_size]
  RopeTableView in_block_rope;           // non-empty: keys are NoPE (see above)
  std::span<float> summaries;            // [num_pages][num_kv_heads][2][head_dim]
};

// kInvalidArgument, nothing written, for a bad spec or layer, mismatched span sizes, a page id
// outside [0, num_blocks), a token count outside [1, block_size], or a rope table narrower than the
// head or shorter than the block.
absl::Status BuildPageSummaries(const PageSummaryArgs& args);

enum class GqaCombine : uint8_t { kSum = 1, kMax = 2 };

struct PageScoreArgs {
  ConstHeadsView q;                  // one token: [1, num_q_heads, head_dim]
  std::span<const float> summaries;  // [num_pages][num_kv_heads][2][head_dim]
  int64_t num_pages = 0;
  int64_t num_kv_heads = 0;
  GqaCombine combine = GqaCombine::kSum;
  // NoPE scoring: when `rope` is non-empty, q is before RoPE and page j is scored with
  // RoPE(q, query_position - page_positions[j]) (|difference| < max_position).
  RopeTableView rope;
  int64_t query_position = 0;
  std::span<const int64_t> page_positions;  // [num_pages] when rope is non-empty
  std::span<float> scores;                  // [num_kv_heads][num_pages]
};

// kInvalidArgument, nothing written, on inconsistent shapes or (NoPE) a position difference outside
// the table.
absl::Status ScorePages(const PageScoreArgs& args);

// For each KV head, the indices of the pages to keep, ascending: with keep_last_page, the last page
// (the partial page holding the newest token) is always kept and not ranked, and the best
// budget_pages - 1 of the others (higher score, then lower index) join it; otherwise the best
// budget_pages. scores is [num_kv_heads][num_pages]; selected is [num_kv_heads][min(budget_pages,
// num_pages)]. kInvalidArgument on size mismatches or budget_pages < 1.
absl::Status SelectTopPages(std::span<const float> scores, int64_t num_kv_heads, int64_t num_pages,
                            int64_t budget_pages, bool keep_last_page, std::span<int32_t> selected);

namespace internal {
absl::Status ValidatePageSummaryShapes(const PageSummaryArgs& args);
absl::Status ValidatePageScoreShapes(const PageScoreArgs& args);
absl::Status ValidateSelectTopPages(size_t num_scores, int64_t num_kv_heads, int64_t num_pages,
                                    int64_t budget_pages, size_t num_selected);
}  // namespace internal

}  // namespace strata::kernels
