#include "kernels/internal/validate.h"

#include <string>
#include <utility>

#include "fmt/format.h"
#include "kernels/dtype.h"

namespace strata::kernels::internal {

absl::Status Invalid(std::string_view what, std::string_view detail) {
  return absl::InvalidArgumentError(fmt::format("{}: {}", what, detail));
}

absl::Status CheckDim(int64_t value, std::string_view what) {
  if (value < 1 || value > kMaxDim) {
    return Invalid(what, fmt::format("{} is outside [1, {}]", value, kMaxDim));
  }
  return absl::OkStatus();
}

absl::Status CheckCount(int64_t value, std::string_view what) {
  if (value < 0 || value > kMaxDim) {
    return Invalid(what, fmt::format("{} is outside [0, {}]", value, kMaxDim));
  }
  return absl::OkStatus();
}

absl::Status CheckNotNull(const void* ptr, std::string_view what) {
  if (ptr == nullptr) return Invalid(what, "null pointer");
  return absl::OkStatus();
}

absl::Status CheckFloatDtype(KvDtype dtype, std::string_view what) {
  if (!IsFloatDtype(dtype)) {
    return Invalid(what, fmt::format("dtype {} is not fp16, bf16 or fp32", DtypeName(dtype)));
  }
  return absl::OkStatus();
}

absl::Status CheckSpanSize(size_t actual, int64_t expected, std::string_view what) {
  if (expected < 0 || actual != static_cast<uint64_t>(expected)) {
    return Invalid(what, fmt::format("holds {} elements, expected {}", actual, expected));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, std::string_view what) {
  int64_t result = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &result)) {
    return Invalid(what, fmt::format("{} * {} overflows", a, b));
  }
  return result;
}

absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b, std::string_view what) {
  int64_t result = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &result)) {
    return Invalid(what, fmt::format("{} + {} overflows", a, b));
  }
  return result;
}

absl::StatusOr<int64_t> MaxOffset(std::initializer_list<DimStride> dims, std::string_view what) {
  int64_t total = 0;
  for (const DimStride& d : dims) {
    if (d.size < 1) return Invalid(what, fmt::format("dimension of size {}", d.size));
    if (d.stride < 0) return Invalid(what, fmt::format("negative stride {}", d.stride));
    int64_t term = 0;
    if (__builtin_mul_overflow(d.size - 1, d.stride, &term) ||
        __builtin_add_overflow(total, term, &total)) {
      return Invalid(what, "strides reach beyond int64 offsets");
    }
  }
  return total;
}

absl::Status CheckNoOverlap(std::initializer_list<DimStride> dims, std::string_view what) {
  DimStride sorted[8];
  size_t n = 0;
  for (const DimStride& d : dims) {
    if (d.size > 1 && n < 8) sorted[n++] = d;
  }
  for (size_t i = 1; i < n; ++i) {  // insertion sort by stride (n <= 8)
    for (size_t j = i; j > 0 && sorted[j].stride < sorted[j - 1].stride; --j) {
      std::swap(sorted[j], sorted[j - 1]);
    }
  }
  int64_t reach = 0;  // largest offset reachable by the dims before the current one
  for (size_t i = 0; i < n; ++i) {
    if (sorted[i].stride <= reach) {
      return Invalid(what, fmt::format("stride {} makes elements overlap", sorted[i].stride));
    }
    reach += (sorted[i].size - 1) * sorted[i].stride;  // bounded by MaxOffset, checked before
  }
  return absl::OkStatus();
}

absl::Status CheckExtent(int64_t max_offset, int64_t extent_elems, std::string_view what) {
  if (extent_elems < 0 || max_offset >= extent_elems) {
    return Invalid(what, fmt::format("shape and strides reach element {} but the extent is {}",
                                     max_offset, extent_elems));
  }
  return absl::OkStatus();
}

absl::Status ValidateMatrix(const ConstMatrixView& view, std::string_view what) {
  if (absl::Status s = CheckNotNull(view.data, what); !s.ok()) return s;
  if (absl::Status s = CheckFloatDtype(view.dtype, what); !s.ok()) return s;
  if (absl::Status s = CheckDim(view.rows, fmt::format("{} rows", what)); !s.ok()) return s;
  if (absl::Status s = CheckDim(view.cols, fmt::format("{} cols", what)); !s.ok()) return s;
  if (view.row_stride < view.cols && view.rows > 1) {
    return Invalid(what, fmt::format("row_stride {} < cols {}", view.row_stride, view.cols));
  }
  absl::StatusOr<int64_t> max_offset =
      MaxOffset({{view.rows, view.row_stride}, {view.cols, 1}}, what);
  if (!max_offset.ok()) return max_offset.status();
  return CheckExtent(*max_offset, view.extent_elems, what);
}

absl::Status ValidateHeads(const ConstHeadsView& view, bool writable, std::string_view what) {
  if (absl::Status s = CheckNotNull(view.data, what); !s.ok()) return s;
  if (absl::Status s = CheckFloatDtype(view.dtype, what); !s.ok()) return s;
  if (absl::Status s = CheckDim(view.num_tokens, fmt::format("{} num_tokens", what)); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckDim(view.num_heads, fmt::format("{} num_heads", what)); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckDim(view.head_dim, fmt::format("{} head_dim", what)); !s.ok()) {
    return s;
  }
  absl::StatusOr<int64_t> max_offset = MaxOffset({{view.num_tokens, view.token_stride},
                                                  {view.num_heads, view.head_stride},
                                                  {view.head_dim, 1}},
                                                 what);
  if (!max_offset.ok()) return max_offset.status();
  if (writable) {
    absl::Status s = CheckNoOverlap({{view.num_tokens, view.token_stride},
                                     {view.num_heads, view.head_stride},
                                     {view.head_dim, 1}},
                                    what);
    if (!s.ok()) return s;
  }
  return CheckExtent(*max_offset, view.extent_elems, what);
}

}  // namespace strata::kernels::internal
