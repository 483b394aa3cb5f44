// Non-owning strided views of the tensors the kernels read and write. A view names a base pointer,
// its dtype, its shape, its element strides and `extent_elems`: how many elements of that dtype are
// addressable from `data` (the allocation the view lives in). Every kernel entry point checks that
// the largest element offset the shape and strides can reach lies inside the extent before it
// touches memory. The innermost dimension is always contiguous (stride 1).
//
// CPU entry points read views as host memory; the CUDA entry points (kernels/cuda/) take the same
// views over device memory. Views own nothing and are plain values.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/kv_layout.h"

namespace strata::kernels {

// a * b, or INT64_MAX when the product overflows. The Dense() helpers use it so that absurd shapes
// give views that validation rejects instead of overflowing.
constexpr int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return INT64_MAX;
  return r;
}

// clang warns that the read-only views below declare a conversion to their own type (the
// enable_if keeps it from ever being chosen); GCC does not know the warning.
#if defined(__clang__)
#define STRATA_ALLOW_SELF_CONVERSION_BEGIN \
  _Pragma("clang diagnostic push") _Pragma("clang diagnostic ignored \"-Wclass-conversion\"")
#define STRATA_ALLOW_SELF_CONVERSION_END _Pragma("clang diagnostic pop")
#else
#define STRATA_ALLOW_SELF_CONVERSION_BEGIN
#define STRATA_ALLOW_SELF_CONVERSION_END
#endif

// A row-major matrix [rows, cols] with a row stride (elements, >= cols).
template <class Ptr>
struct BasicMatrixView {
  Ptr data = nullptr;
  KvDtype dtype = KvDtype::kFloat32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  int64_t extent_elems = 0;

  // A densely packed matrix: row_stride = cols, extent = rows * cols.
  static BasicMatrixView Dense(Ptr data, KvDtype dtype, int64_t rows, int64_t cols) {
    return {data, dtype, rows, cols, cols, SaturatingMul(rows, cols)};
  }
  // A mutable view converts to a read-only one. (A template, so that the read-only view declares
  // no usable conversion to its own type.)
  STRATA_ALLOW_SELF_CONVERSION_BEGIN
  template <class P = Ptr, std::enable_if_t<std::is_same_v<P, void*>, int> = 0>
  operator BasicMatrixView<const void*>() const {
    return {data, dtype, rows, cols, row_stride, extent_elems};
  }
  STRATA_ALLOW_SELF_CONVERSION_END
};
using MatrixView = BasicMatrixView<void*>;
using ConstMatrixView = BasicMatrixView<const void*>;

// Per-token, per-head vectors [num_tokens, num_heads, head_dim] (q, k, or an attention output),
// with token and head strides in elements, head_dim contiguous.
template <class Ptr>
struct BasicHeadsView {
  Ptr data = nullptr;
  KvDtype dtype = KvDtype::kFloat32;
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t token_stride = 0;
  int64_t head_stride = 0;
  int64_t extent_elems = 0;

  // A densely packed [num_tokens, num_heads, head_dim] tensor.
  static BasicHeadsView Dense(Ptr data, KvDtype dtype, int64_t num_tokens, int64_t num_heads,
                              int64_t head_dim) {
    return {data,       dtype,
            num_tokens, num_heads,
            head_dim,   SaturatingMul(num_heads, head_dim),
            head_dim,   SaturatingMul(num_tokens, SaturatingMul(num_heads, head_dim))};
  }
  STRATA_ALLOW_SELF_CONVERSION_BEGIN
  template <class P = Ptr, std::enable_if_t<std::is_same_v<P, void*>, int> = 0>
  operator BasicHeadsView<const void*>() const {
    return {data, dtype, num_tokens, num_heads, head_dim, token_stride, head_stride, extent_elems};
  }
  STRATA_ALLOW_SELF_CONVERSION_END
};
using HeadsView = BasicHeadsView<void*>;
using ConstHeadsView = BasicHeadsView<const void*>;

}  // namespace strata::kernels
