#include "kernels/cuda/quant.h"

#include <algorithm>

#include "kernels/cuda/common.cuh"

namespace strata::kernels::cuda {
namespace {

struct QuantGeometry {
  int64_t rows, cols, row_stride, group;
  int per_token;  // 1: groups along channels of a token; 0: along tokens of a channel
  int asymmetric;
  int bits;
};

__device__ __forceinline__ int64_t GroupOf(const QuantGeometry& g, int64_t r, int64_t c) {
  return g.per_token ? r * (g.cols / g.group) + c / g.group : (r / g.group) * g.cols + c;
}

template <class T>
__global__ void GroupStatsKernel(QuantGeometry g, const T* x, float* scales, float* zeros,
                                 int64_t num_groups) {
  const int64_t group = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (group >= num_groups) return;
  int64_t r0, c0, dr, dc;
  if (g.per_token) {
    const int64_t groups_per_row = g.cols / g.group;
    r0 = group / groups_per_row;
    c0 = (group - r0 * groups_per_row) * g.group;
    dr = 0;
    dc = 1;
  } else {
    r0 = (group / g.cols) * g.group;
    c0 = group - (group / g.cols) * g.cols;
    dr = 1;
    dc = 0;
  }
  float lo = INFINITY, hi = -INFINITY;
  for (int64_t k = 0; k < g.group; ++k) {
    const float v = internal::ToF32(x[(r0 + k * dr) * g.row_stride + c0 + k * dc]);
    if (g.asymmetric) {
      lo = fminf(lo, v);
      hi = fmaxf(hi, v);
    } else {
      hi = fmaxf(hi, fabsf(v));
    }
  }
  if (g.asymmetric) {
    scales[group] = __fdiv_rn(__fsub_rn(hi, lo), static_cast<float>((1 << g.bits) - 1));
    zeros[group] = lo;
  } else {
    scales[group] = __fdiv_rn(hi, 127.0f);
  }
}

// One thread per packed word.
template <class T>
__global__ void CodesKernel(QuantGeometry g, const T* x, const float* scales, const float* zeros,
                            uint32_t* codes, int64_t num_words) {
  const int64_t w = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (w >= num_words) return;
  const int per_word = 32 / g.bits;
  const int64_t words_per_row = g.cols / per_word;
  const int64_t r = w / words_per_row;
  const int64_t c0 = (w - r * words_per_row) * per_word;
  const float levels = static_cast<float>((1 << g.bits) - 1);
  uint32_t word = 0;
  for (int k = 0; k < per_word; ++k) {
    const int64_t c = c0 + k;
    const float v = internal::ToF32(x[r * g.row_stride + c]);
    const int64_t group = GroupOf(g, r, c);
    const float scale = scales[group];
    uint32_t code = 0;
    if (g.asymmetric) {
      if (scale > 0.0f) {
        const float q = rintf(__fdiv_rn(__fsub_rn(v, zeros[group]), scale));
        code = q >= 0.0f ? static_cast<uint32_t>(fminf(q, levels)) : 0u;
      }
    } else if (scale > 0.0f) {
      const float q = rintf(__fdiv_rn(v, scale));
      const float clamped = q == q ? fminf(fmaxf(q, -127.0f), 127.0f) : 0.0f;
      code = static_cast<uint32_t>(static_cast<int32_t>(clamped)) & 0xffu;
    }
    word |= code << (k * g.bits);
  }
  codes[w] = word;
}

template <class T>
__global__ void DequantKernel(QuantGeometry g, const uint32_t* codes, const float* scales,
                              const float* zeros, T* out, int64_t count) {
  const int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (e >= count) return;
  const int64_t r = e / g.cols;
  const int64_t c = e - r * g.cols;
  const int per_word = 32 / g.bits;
  const uint32_t word = codes[e / per_word];
  const uint32_t code = (word >> ((e % per_word) * g.bits)) & ((1u << g.bits) - 1u);
  const int64_t group = GroupOf(g, r, c);
  float v;
  if (g.asymmetric) {
    v = __fadd_rn(__fmul_rn(static_cast<float>(code), scales[group]), zeros[group]);
  } else {
    v = __fmul_rn(static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(code))),
                  scales[group]);
  }
  out[r * g.row_stride + c] = internal::FromF32<T>(v);
}

QuantGeometry Geometry(const QuantParams& p, const ConstMatrixView& m) {
  return {m.rows,
          m.cols,
          m.row_stride,
          p.group_size,
          p.axis == QuantAxis::kPerToken,
          p.scheme == QuantScheme::kAsymmetric,
          p.bits};
}

unsigned Blocks(int64_t n) { return static_cast<unsigned>(internal::CeilDiv(n, 256)); }

}  // namespace

absl::Status Quantize(const QuantParams& params, const ConstMatrixView& x,
                      std::span<uint32_t> codes, std::span<float> scales, std::span<float> zeros,
                      const LaunchOptions& options) {
  if (absl::Status s =
          kernels::internal::ValidateQuantize(params, x, codes.size(), scales.size(), zeros.size());
      !s.ok()) {
    return s;
  }
  if (params.fp16_params) {
    return absl::InvalidArgumentError("quant: fp16_params are computed on the CPU only");
  }
  const QuantGeometry g = Geometry(params, x);
  const auto groups = static_cast<int64_t>(scales.size());
  const auto words = static_cast<int64_t>(codes.size());
  internal::DispatchDtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    GroupStatsKernel<T><<<Blocks(groups), 256, 0, options.stream>>>(
        g, static_cast<const T*>(x.data), scales.data(), zeros.data(), groups);
    CodesKernel<T><<<Blocks(words), 256, 0, options.stream>>>(
        g, static_cast<const T*>(x.data), scales.data(), zeros.data(), codes.data(), words);
  });
  return internal::LaunchStatus("quantize");
}

absl::Status Dequantize(const QuantParams& params, std::span<const uint32_t> codes,
                        std::span<const float> scales, std::span<const float> zeros,
                        const MatrixView& out, const LaunchOptions& options) {
  if (absl::Status s = kernels::internal::ValidateDequantize(params, out, codes.size(),
                                                             scales.size(), zeros.size());
      !s.ok()) {
    return s;
  }
  const QuantGeometry g = Geometry(params, out);
  const int64_t count = out.rows * out.cols;
  internal::DispatchDtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    DequantKernel<T><<<Blocks(count), 256, 0, options.stream>>>(
        g, codes.data(), scales.data(), zeros.data(), static_cast<T*>(out.data), count);
  });
  return internal::LaunchStatus("dequantize");
}

}  // namespace strata::kernels::cuda
