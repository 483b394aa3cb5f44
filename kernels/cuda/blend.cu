#include "kernels/cuda/blend.h"

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/topk.cuh"
#include "kernels/internal/validate.h"

namespace strata::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// One warp per token.
template <class A, class B>
__global__ void DeviationKernel(const A* fresh, int64_t fresh_stride, const B* cached,
                                int64_t cached_stride, int64_t rows, int64_t cols, float* out) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float sum = 0.0f;
  for (int64_t c = lane; c < cols; c += 32) {
    const float d = internal::ToF32(fresh[row * fresh_stride + c]) -
                    internal::ToF32(cached[row * cached_stride + c]);
    sum += d * d;
  }
  sum = internal::WarpSum(sum);
  if (lane == 0) out[row] = sum;
}

}  // namespace

absl::Status TokenDeviation(const ConstMatrixView& fresh, const ConstMatrixView& cached,
                            std::span<float> deviation, const LaunchOptions& options) {
  if (absl::Status s = kernels::internal::ValidateTokenDeviation(fresh, cached, deviation.size());
      !s.ok()) {
    return s;
  }
  const auto blocks = static_cast<unsigned>(internal::CeilDiv(fresh.rows, kWarpsPerBlock));
  internal::DispatchDtype(fresh.dtype, [&](auto fresh_tag) {
    using A = decltype(fresh_tag);
    internal::DispatchDtype(cached.dtype, [&](auto cached_tag) {
      using B = decltype(cached_tag);
      DeviationKernel<A, B><<<blocks, 32 * kWarpsPerBlock, 0, options.stream>>>(
          static_cast<const A*>(fresh.data), fresh.row_stride, static_cast<const B*>(cached.data),
          cached.row_stride, fresh.rows, fresh.cols, deviation.data());
    });
  });
  return internal::LaunchStatus("token deviation");
}

absl::Status SelectBlendTokens(std::span<const float> deviation, int64_t suffix_tokens,
                               double ratio, std::span<int32_t> selected,
                               const LaunchOptions& options) {
  const auto n = static_cast<int64_t>(deviation.size());
  absl::StatusOr<int64_t> count = BlendSelectionCount(n, suffix_tokens, ratio);
  if (!count.ok()) return count.status();
  if (absl::Status s =
          kernels::internal::CheckSpanSize(selected.size(), *count + suffix_tokens, "selected");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = kernels::internal::CheckNotNull(deviation.data(), "deviation"); !s.ok()) {
    return s;
  }
  internal::SelectTopKKernel<<<1, internal::kTopKThreads, 0, options.stream>>>(
      deviation.data(), n, n - suffix_tokens, *count, selected.data(), 0, n - suffix_tokens,
      suffix_tokens);
  return internal::LaunchStatus("select blend tokens");
}

}  // namespace strata::kernels::cuda
