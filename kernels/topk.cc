#include "kernels/topk.h"

#include <algorithm>
#include <functional>

#include "kernels/internal/rank_key.h"

namespace strata::kernels {

std::vector<int32_t> TopKIndices(std::span<const float> scores, int64_t k) {
  const auto n = static_cast<int64_t>(scores.size());
  k = std::clamp<int64_t>(k, 0, n);
  std::vector<uint64_t> keys(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    keys[i] = internal::RankKey(scores[i], static_cast<uint32_t>(i));
  }
  std::nth_element(keys.begin(), keys.begin() + k, keys.end(), std::greater<>());
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    out.push_back(static_cast<int32_t>(internal::RankKeyIndex(keys[static_cast<size_t>(i)])));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace strata::kernels
