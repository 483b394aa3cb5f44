// CUDA page summaries, page scores and top-K page selection (see kernels/page_scores.h). All
// buffers are device memory. Page ids and token counts are checked on the device (a bad page's
// summary is filled with NaN and kDeviceErrorBlockId / kDeviceErrorPageTokens is reported); a page
// position too far from the query gives a NaN score (ranked last) and kDeviceErrorPosition.
// Selection uses the same rank order as the CPU reference and returns the same indices.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/cuda/device.h"
#include "kernels/page_scores.h"

namespace strata::kernels::cuda {

absl::Status BuildPageSummaries(const PageSummaryArgs& args, const LaunchOptions& options = {});
absl::Status ScorePages(const PageScoreArgs& args, const LaunchOptions& options = {});
absl::Status SelectTopPages(std::span<const float> scores, int64_t num_kv_heads, int64_t num_pages,
                            int64_t budget_pages, bool keep_last_page, std::span<int32_t> selected,
                            const LaunchOptions& options = {});

}  // namespace strata::kernels::cuda
