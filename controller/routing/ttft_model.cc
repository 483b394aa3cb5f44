#include "controller/routing/ttft_model.h"

#include <algorithm>
#include <numeric>

namespace strata::controller {

TtftEstimate ModelTtft(const TtftModelOptions& options, uint64_t prompt_tokens,
                       const RouteCandidate& candidate) {
  TtftEstimate estimate;
  const double per_token = options.prefill_s_per_token;
  for (const CachedChunk& chunk : candidate.cached_prefix) {
    const uint64_t tokens =
        std::min<uint64_t>(chunk.tokens, prompt_tokens - estimate.cached_tokens);
    if (tokens == 0) break;
    const double recompute_s = static_cast<double>(tokens) * per_token;
    const double bandwidth = options.tier_bytes_per_s[static_cast<size_t>(chunk.tier)];
    const double load_s =
        bandwidth <= 0 ? 0 : static_cast<double>(tokens * options.kv_bytes_per_token) / bandwidth;
    estimate.load_s += std::min(load_s, recompute_s);
    if (load_s < recompute_s) estimate.loaded_tokens += tokens;
    estimate.saved_s += recompute_s;
    estimate.cached_tokens += tokens;
  }
  estimate.prefill_s = static_cast<double>(prompt_tokens - estimate.cached_tokens) * per_token;
  estimate.queue_s = static_cast<double>(candidate.queued_prefill_tokens) * per_token;
  return estimate;
}

std::vector<size_t> RankByModelledTtft(const TtftModelOptions& options, uint64_t prompt_tokens,
                                       std::span<const RouteCandidate> candidates) {
  std::vector<double> ttft(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    ttft[i] = ModelTtft(options, prompt_tokens, candidates[i]).ttft_s();
  }
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ttft[a] < ttft[b]; });
  return order;
}

}  // namespace strata::controller
