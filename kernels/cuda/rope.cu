#include "kernels/cuda/rope.h"

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/internal/validate.h"

namespace strata::kernels::cuda {
namespace {

struct RopeGeometry {
  const float* cos_sin;
  int64_t max_position;
  int64_t rotary_dim;
  int neox;
  int64_t heads;
  int64_t head_dim;
  int64_t in_token_stride, in_head_stride, out_token_stride, out_head_stride;
};

// One block per token; threads stride over (head, pair) and, out of place, the pass-through dims.
// With `old_positions` non-null the token is rotated back from its old position first.
template <class T>
__global__ void RopeKernel(RopeGeometry g, const T* in, T* out, const int64_t* positions,
                           const int64_t* old_positions, uint32_t* error_flags) {
  const int64_t t = blockIdx.x;
  const int64_t p = positions[t];
  const int64_t p_old = old_positions != nullptr ? old_positions[t] : 0;
  if (p < 0 || p >= g.max_position || p_old < 0 || p_old >= g.max_position) {
    if (threadIdx.x == 0) internal::ReportError(error_flags, kDeviceErrorPosition);
    return;
  }
  const int64_t half = g.rotary_dim / 2;
  const float* cos = g.cos_sin + p * g.rotary_dim;
  const float* cos_old = g.cos_sin + p_old * g.rotary_dim;
  const int64_t pairs = g.heads * half;
  for (int64_t e = threadIdx.x; e < pairs; e += blockDim.x) {
    const int64_t h = e / half;
    const int64_t i = e - h * half;
    const int64_t a = g.neox ? i : 2 * i;
    const int64_t b = g.neox ? i + half : 2 * i + 1;
    const T* src = in + t * g.in_token_stride + h * g.in_head_stride;
    T* dst = out + t * g.out_token_stride + h * g.out_head_stride;
    float x = internal::ToF32(src[a]);
    float y = internal::ToF32(src[b]);
    if (old_positions != nullptr) {
      const float c = cos_old[i], s = cos_old[half + i];
      const float xr = x * c + y * s;
      const float yr = y * c - x * s;
      x = xr;
      y = yr;
    }
    const float c = cos[i], s = cos[half + i];
    dst[a] = internal::FromF32<T>(x * c - y * s);
    dst[b] = internal::FromF32<T>(y * c + x * s);
  }
  if (in != out) {
    const int64_t rest = g.head_dim - g.rotary_dim;
    for (int64_t e = threadIdx.x; e < g.heads * rest; e += blockDim.x) {
      const int64_t h = e / rest;
      const int64_t d = g.rotary_dim + (e - h * rest);
      out[t * g.out_token_stride + h * g.out_head_stride + d] =
          in[t * g.in_token_stride + h * g.in_head_stride + d];
    }
  }
}

absl::Status Launch(const RopeTableView& table, const ConstHeadsView& in, const HeadsView& out,
                    std::span<const int64_t> positions, const int64_t* old_positions,
                    const LaunchOptions& options) {
  if (in.num_tokens > INT32_MAX) return kernels::internal::Invalid("rope", "too many tokens");
  RopeGeometry g{
      table.cos_sin,    table.max_position, table.rotary_dim, table.style == RopeStyle::kNeox,
      in.num_heads,     in.head_dim,        in.token_stride,  in.head_stride,
      out.token_stride, out.head_stride};
  const int threads =
      static_cast<int>(std::clamp<int64_t>(in.num_heads * (table.rotary_dim / 2), 32, 256));
  internal::DispatchDtype(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    RopeKernel<T><<<static_cast<unsigned>(in.num_tokens), threads, 0, options.stream>>>(
        g, static_cast<const T*>(in.data), static_cast<T*>(out.data), positions.data(),
        old_positions, options.error_flags);
  });
  return internal::LaunchStatus("rope");
}

}  // namespace

absl::StatusOr<DeviceRopeTable> DeviceRopeTable::Create(const RopeTable& table) {
  DeviceRopeTable out;
  const size_t bytes = table.cos_sin().size() * sizeof(float);
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(bytes);
  if (!buffer.ok()) return buffer.status();
  out.buffer_ = *std::move(buffer);
  if (absl::Status s = out.buffer_.CopyFromHost(table.cos_sin().data(), bytes); !s.ok()) return s;
  out.view_ = table.view();
  out.view_.cos_sin = out.buffer_.as<const float>();
  return out;
}

absl::Status ApplyRope(const RopeTableView& table, const ConstHeadsView& in, const HeadsView& out,
                       std::span<const int64_t> positions, const LaunchOptions& options) {
  if (absl::Status s = kernels::internal::ValidateRopeViews(table, in, out, true); !s.ok())
    return s;
  if (absl::Status s =
          kernels::internal::CheckSpanSize(positions.size(), in.num_tokens, "rope positions");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = kernels::internal::CheckNotNull(positions.data(), "rope positions");
      !s.ok()) {
    return s;
  }
  return Launch(table, in, out, positions, nullptr, options);
}

absl::Status ReRotateRope(const RopeTableView& table, const HeadsView& x,
                          std::span<const int64_t> old_positions,
                          std::span<const int64_t> new_positions, const LaunchOptions& options) {
  if (absl::Status s = kernels::internal::ValidateRopeViews(table, x, x, true); !s.ok()) return s;
  for (std::span<const int64_t> p : {old_positions, new_positions}) {
    if (absl::Status s = kernels::internal::CheckSpanSize(p.size(), x.num_tokens, "rope positions");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = kernels::internal::CheckNotNull(p.data(), "rope positions"); !s.ok()) {
      return s;
    }
  }
  return Launch(table, x, x, new_positions, old_positions.data(), options);
}

}  // namespace strata::kernels::cuda
