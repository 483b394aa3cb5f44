#include "kernels/blend.h"

#include <cmath>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/dtype.h"
#include "kernels/internal/validate.h"
#include "kernels/topk.h"

namespace strata::kernels {
namespace {

template <class T>
void RowToFloat(const ConstMatrixView& m, int64_t r, float* out) {
  const T* row = static_cast<const T*>(m.data) + r * m.row_stride;
  for (int64_t c = 0; c < m.cols; ++c) out[c] = ToFloat(row[c]);
}

}  // namespace

namespace internal {

absl::Status ValidateTokenDeviation(const ConstMatrixView& fresh, const ConstMatrixView& cached,
                                    size_t deviation_size) {
  STRATA_RETURN_IF_ERROR(ValidateMatrix(fresh, "blend fresh"));
  STRATA_RETURN_IF_ERROR(ValidateMatrix(cached, "blend cached"));
  if (fresh.rows != cached.rows || fresh.cols != cached.cols) {
    return Invalid("blend", "fresh and cached differ in shape");
  }
  return CheckSpanSize(deviation_size, fresh.rows, "blend deviation");
}

}  // namespace internal

absl::Status TokenDeviation(const ConstMatrixView& fresh, const ConstMatrixView& cached,
                            std::span<float> deviation) {
  STRATA_RETURN_IF_ERROR(internal::ValidateTokenDeviation(fresh, cached, deviation.size()));
  std::vector<float> a(static_cast<size_t>(fresh.cols));
  std::vector<float> b(static_cast<size_t>(fresh.cols));
  for (int64_t r = 0; r < fresh.rows; ++r) {
    DispatchFloatDtype(fresh.dtype,
                       [&](auto tag) { RowToFloat<decltype(tag)>(fresh, r, a.data()); });
    DispatchFloatDtype(cached.dtype,
                       [&](auto tag) { RowToFloat<decltype(tag)>(cached, r, b.data()); });
    float sum = 0.0f;
    for (int64_t c = 0; c < fresh.cols; ++c) {
      const float d = a[static_cast<size_t>(c)] - b[static_cast<size_t>(c)];
      sum += d * d;
    }
    deviation[static_cast<size_t>(r)] = sum;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> BlendSelectionCount(int64_t num_tokens, int64_t suffix_tokens,
                                            double ratio) {
  STRATA_RETURN_IF_ERROR(internal::CheckDim(num_tokens, "blend num_tokens"));
  if (suffix_tokens < 0 || suffix_tokens > num_tokens) {
    return internal::Invalid(
        "blend", fmt::format("suffix_tokens {} outside [0, {}]", suffix_tokens, num_tokens));
  }
  if (!(ratio >= 0.0 && ratio <= 1.0)) {
    return internal::Invalid("blend", fmt::format("ratio {} outside [0, 1]", ratio));
  }
  return static_cast<int64_t>(std::floor(static_cast<double>(num_tokens - suffix_tokens) * ratio));
}

absl::StatusOr<std::vector<int32_t>> SelectBlendTokens(std::span<const float> deviation,
                                                       int64_t suffix_tokens, double ratio) {
  const auto n = static_cast<int64_t>(deviation.size());
  STRATA_ASSIGN_OR_RETURN(const int64_t count, BlendSelectionCount(n, suffix_tokens, ratio));
  std::vector<int32_t> selected =
      TopKIndices(deviation.first(static_cast<size_t>(n - suffix_tokens)), count);
  for (int64_t t = n - suffix_tokens; t < n; ++t) selected.push_back(static_cast<int32_t>(t));
  return selected;
}

}  // namespace strata::kernels
