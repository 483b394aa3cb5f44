// Deterministic top-k selection (CPU reference), the building block of page selection and
// CacheBlend token selection. Ranking: higher score first, ties by lower index, NaN last
// (internal/rank_key.h); the CUDA selection kernels use the same order. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace strata::kernels {

// Indices of the min(k, scores.size()) best-ranked scores, in ascending index order. k <= 0 gives
// an empty result. scores.size() must stay below 2^32 (checked by the callers' validation).
std::vector<int32_t> TopKIndices(std::span<const float> scores, int64_t k);

}  // namespace strata::kernels
