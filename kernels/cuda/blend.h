// CUDA CacheBlend token selection (see kernels/blend.h): per-token deviation in fp32 and the
// deterministic top-ratio selection plus suffix, on device buffers. The selection returns exactly
// the CPU reference's indices for the same deviations.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/blend.h"
#include "kernels/cuda/device.h"

namespace strata::kernels::cuda {

absl::Status TokenDeviation(const ConstMatrixView& fresh, const ConstMatrixView& cached,
                            std::span<float> deviation, const LaunchOptions& options = {});

// selected.size() must equal BlendSelectionCount(deviation.size(), suffix_tokens, ratio) +
// suffix_tokens; it receives the indices in ascending order.
absl::Status SelectBlendTokens(std::span<const float> deviation, int64_t suffix_tokens,
                               double ratio, std::span<int32_t> selected,
                               const LaunchOptions& options = {});

}  // namespace strata::kernels::cuda
