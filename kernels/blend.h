// CacheBlend token selection (ALGORITHMS.md section 3b): CPU reference.
//
// At the check layer the engine has fresh K (or V) for every token and the cached one; the
// per-token deviation is delta_t = sum_c (fresh[t][c] - cached[t][c])^2, accumulated in fp32. The
// tokens to recompute are the floor((N - suffix) * ratio) non-suffix tokens with the largest
// deviation (ties: lower index first; NaN last), sorted, followed by every suffix (question) token
// [N - suffix, N). ratio 1 selects every token (full prefill); ratio 0 only the suffix.
// Pure functions over caller-owned buffers; thread-safe when outputs are not shared.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor_view.h"

namespace strata::kernels {

// deviation[t] = sum_c (fresh[t][c] - cached[t][c])^2 in fp32. fresh and cached have the same shape
// (dtypes may differ); deviation.size() == rows. kInvalidArgument, nothing written, otherwise.
absl::Status TokenDeviation(const ConstMatrixView& fresh, const ConstMatrixView& cached,
                            std::span<float> deviation);

// How many non-suffix tokens a ratio selects: floor((num_tokens - suffix_tokens) * ratio), computed
// in fp64 as the reference code does. kInvalidArgument for suffix_tokens outside [0, num_tokens] or
// a ratio outside [0, 1].
absl::StatusOr<int64_t> BlendSelectionCount(int64_t num_tokens, int64_t suffix_tokens,
                                            double ratio);

// The selected token indices, ascending (see above). deviation holds all num_tokens = its size
// tokens; the suffix's deviations are ignored.
absl::StatusOr<std::vector<int32_t>> SelectBlendTokens(std::span<const float> deviation,
                                                       int64_t suffix_tokens, double ratio);

namespace internal {
absl::Status ValidateTokenDeviation(const ConstMatrixView& fresh, const ConstMatrixView& cached,
                                    size_t deviation_size);
}  // namespace internal

}  // namespace strata::kernels
