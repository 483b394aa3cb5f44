// Shape, stride and extent checks shared by the CPU references and the CUDA entry points, so both
// accept and reject exactly the same arguments. Every failure is kInvalidArgument with a message
// naming the offending argument. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "kernels/tensor_view.h"

namespace strata::kernels::internal {

// Every dimension and count a kernel takes lies in [1, kMaxDim], so that index arithmetic on
// products of a few of them never overflows int64.
inline constexpr int64_t kMaxDim = int64_t{1} << 31;

// kInvalidArgument "<what>: <detail>".
absl::Status Invalid(std::string_view what, std::string_view detail);

// value in [1, kMaxDim].
absl::Status CheckDim(int64_t value, std::string_view what);
// value in [0, kMaxDim].
absl::Status CheckCount(int64_t value, std::string_view what);
absl::Status CheckNotNull(const void* ptr, std::string_view what);
// fp16, bf16 or fp32.
absl::Status CheckFloatDtype(KvDtype dtype, std::string_view what);
absl::Status CheckSpanSize(size_t actual, int64_t expected, std::string_view what);

// a * b (or a + b) or kInvalidArgument when it overflows int64 or either input is negative.
absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, std::string_view what);
absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b, std::string_view what);

struct DimStride {
  int64_t size;
  int64_t stride;
};
// Largest element offset a view with these (size, stride) dims reaches: sum((size - 1) * stride).
// Sizes must already be checked positive; a negative stride, or an offset beyond int64, fails.
absl::StatusOr<int64_t> MaxOffset(std::initializer_list<DimStride> dims, std::string_view what);
// Sufficient condition that no two index tuples of the view name the same element: ordering the
// dims of size > 1 by stride, each stride exceeds the largest offset the smaller ones reach. Views
// a kernel writes must pass it (overlapping outputs would be order-dependent, and racy on a GPU).
absl::Status CheckNoOverlap(std::initializer_list<DimStride> dims, std::string_view what);
// max_offset < extent_elems.
absl::Status CheckExtent(int64_t max_offset, int64_t extent_elems, std::string_view what);

// A matrix view: non-null, float dtype, positive dims, row_stride >= cols when rows > 1, inside
// its extent.
absl::Status ValidateMatrix(const ConstMatrixView& view, std::string_view what);
// A heads view: non-null, float dtype, positive dims, non-negative strides, inside its extent;
// when `writable`, also free of overlap (CheckNoOverlap).
absl::Status ValidateHeads(const ConstHeadsView& view, bool writable, std::string_view what);

}  // namespace strata::kernels::internal
