#include "kernels/rope.h"

#include <cmath>
#include <numbers>
#include <string>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/dtype.h"
#include "kernels/internal/validate.h"

namespace strata::kernels {
namespace {

using internal::Invalid;

constexpr int64_t kMaxTableEntries = int64_t{1} << 28;

// vLLM's RotaryEmbedding._compute_inv_freq and Llama3RotaryEmbedding._compute_inv_freq, in fp32.
std::vector<double> InvFreqFp32(const RopeConfig& c) {
  const int64_t half = c.rotary_dim / 2;
  std::vector<double> out(static_cast<size_t>(half));
  const float rotary_dim = static_cast<float>(c.rotary_dim);
  const float base = static_cast<float>(c.theta);
  const Llama3ScalingParams& l3 = c.llama3;
  const float factor = static_cast<float>(l3.factor);
  const float low = static_cast<float>(l3.low_freq_factor);
  const float high = static_cast<float>(l3.high_freq_factor);
  const float original = static_cast<float>(l3.original_max_position);
  const float low_freq_wavelen = static_cast<float>(l3.original_max_position / l3.low_freq_factor);
  const float high_freq_wavelen =
      static_cast<float>(l3.original_max_position / l3.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / rotary_dim;
    float inv = 1.0f / std::pow(base, exponent);
    if (c.scaling == RopeScaling::kLlama3) {
      const float wave_len = two_pi / inv;
      const float smooth = l3.low_freq_factor != l3.high_freq_factor
                               ? (original / wave_len - low) / (high - low)
                               : 0.0f;
      if (wave_len < high_freq_wavelen) {
        // unchanged
      } else if (wave_len > low_freq_wavelen) {
        inv = inv / factor;
      } else {
        inv = (1.0f - smooth) * inv / factor + smooth * inv;
      }
    }
    out[static_cast<size_t>(i)] = inv;
  }
  return out;
}

// The same frequencies in fp64 (ALGORITHMS.md section 1 formulas).
std::vector<double> InvFreqFp64(const RopeConfig& c) {
  const int64_t half = c.rotary_dim / 2;
  std::vector<double> out(static_cast<size_t>(half));
  const Llama3ScalingParams& l3 = c.llama3;
  for (int64_t i = 0; i < half; ++i) {
    double inv = std::pow(c.theta, -2.0 * static_cast<double>(i) / c.rotary_dim);
    if (c.scaling == RopeScaling::kLlama3) {
      const double wave_len = 2.0 * std::numbers::pi / inv;
      if (wave_len < l3.original_max_position / l3.high_freq_factor) {
        // unchanged
      } else if (wave_len > l3.original_max_position / l3.low_freq_factor) {
        inv /= l3.factor;
      } else {
        const double m = l3.low_freq_factor != l3.high_freq_factor
                             ? (l3.original_max_position / wave_len - l3.low_freq_factor) /
                                   (l3.high_freq_factor - l3.low_freq_factor)
                             : 0.0;
        inv = (1.0 - m) * inv / l3.factor + m * inv;
      }
    }
    out[static_cast<size_t>(i)] = inv;
  }
  return out;
}

bool Disjoint(const ConstHeadsView& a, const ConstHeadsView& b) {
  auto reach = [](const ConstHeadsView& v) {
    return ((v.num_tokens - 1) * v.token_stride + (v.num_heads - 1) * v.head_stride + v.head_dim) *
           static_cast<int64_t>(DtypeSizeBytes(v.dtype));
  };
  const auto a0 = reinterpret_cast<uintptr_t>(a.data);
  const auto b0 = reinterpret_cast<uintptr_t>(b.data);
  return a0 + static_cast<uintptr_t>(reach(a)) <= b0 || b0 + static_cast<uintptr_t>(reach(b)) <= a0;
}

absl::Status CheckPositions(const RopeTable& table, std::span<const int64_t> positions,
                            int64_t num_tokens, std::string_view what) {
  STRATA_RETURN_IF_ERROR(internal::CheckSpanSize(positions.size(), num_tokens, what));
  for (size_t t = 0; t < positions.size(); ++t) {
    if (positions[t] < 0 || positions[t] >= table.max_position()) {
      return Invalid(what, fmt::format("position {} of token {} is outside the table [0, {})",
                                       positions[t], t, table.max_position()));
    }
  }
  return absl::OkStatus();
}

template <class T>
void ApplyTyped(const RopeTable& table, const ConstHeadsView& in, const HeadsView& out,
                std::span<const int64_t> positions) {
  const int64_t half = table.half_dim();
  const int64_t rotary = table.rotary_dim();
  const bool neox = table.style() == RopeStyle::kNeox;
  for (int64_t t = 0; t < in.num_tokens; ++t) {
    const float* cos = table.cos_row(positions[static_cast<size_t>(t)]);
    const float* sin = cos + half;
    for (int64_t h = 0; h < in.num_heads; ++h) {
      const T* src = static_cast<const T*>(in.data) + t * in.token_stride + h * in.head_stride;
      T* dst = static_cast<T*>(out.data) + t * out.token_stride + h * out.head_stride;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = neox ? i : 2 * i;
        const int64_t b = neox ? i + half : 2 * i + 1;
        float x = ToFloat(src[a]);
        float y = ToFloat(src[b]);
        internal::RotatePair(x, y, cos[i], sin[i]);
        dst[a] = FromFloat<T>(x);
        dst[b] = FromFloat<T>(y);
      }
      if (dst != src) {
        for (int64_t d = rotary; d < in.head_dim; ++d) dst[d] = src[d];
      }
    }
  }
}

template <class T>
void ReRotateTyped(const RopeTable& table, const HeadsView& x, std::span<const int64_t> old_pos,
                   std::span<const int64_t> new_pos) {
  const int64_t half = table.half_dim();
  const bool neox = table.style() == RopeStyle::kNeox;
  for (int64_t t = 0; t < x.num_tokens; ++t) {
    const float* cos_old = table.cos_row(old_pos[static_cast<size_t>(t)]);
    const float* sin_old = cos_old + half;
    const float* cos_new = table.cos_row(new_pos[static_cast<size_t>(t)]);
    const float* sin_new = cos_new + half;
    for (int64_t h = 0; h < x.num_heads; ++h) {
      T* v = static_cast<T*>(x.data) + t * x.token_stride + h * x.head_stride;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t a = neox ? i : 2 * i;
        const int64_t b = neox ? i + half : 2 * i + 1;
        float p = ToFloat(v[a]);
        float q = ToFloat(v[b]);
        internal::RotatePair(p, q, cos_old[i], -sin_old[i]);  // inverse at the old position
        internal::RotatePair(p, q, cos_new[i], sin_new[i]);
        v[a] = FromFloat<T>(p);
        v[b] = FromFloat<T>(q);
      }
    }
  }
}

}  // namespace

absl::StatusOr<RopeTable> RopeTable::Create(const RopeConfig& config) {
  if (config.rotary_dim < 2 || config.rotary_dim % 2 != 0 || config.rotary_dim > 65536) {
    return Invalid("rope", fmt::format("rotary_dim {} is not an even number in [2, 65536]",
                                       config.rotary_dim));
  }
  if (!(config.theta > 1.0) || !std::isfinite(config.theta)) {
    return Invalid("rope", fmt::format("theta {} is not a finite number > 1", config.theta));
  }
  if (config.max_position < 1 || config.max_position > (int64_t{1} << 24) ||
      config.max_position * config.rotary_dim > kMaxTableEntries) {
    return Invalid("rope", fmt::format("max_position {} with rotary_dim {} is outside the table "
                                       "limits (positions <= 2^24, entries <= 2^28)",
                                       config.max_position, config.rotary_dim));
  }
  STRATA_RETURN_IF_ERROR(internal::CheckFloatDtype(config.table_dtype, "rope table"));
  if (config.scaling == RopeScaling::kLlama3) {
    const Llama3ScalingParams& l3 = config.llama3;
    if (!(l3.factor > 0) || !(l3.low_freq_factor > 0) ||
        !(l3.high_freq_factor >= l3.low_freq_factor) || !(l3.original_max_position > 0) ||
        !std::isfinite(l3.factor) || !std::isfinite(l3.high_freq_factor) ||
        !std::isfinite(l3.original_max_position)) {
      return Invalid("rope",
                     "llama3 scaling needs factor > 0, 0 < low_freq_factor <= "
                     "high_freq_factor and original_max_position > 0, all finite");
    }
  } else if (config.scaling != RopeScaling::kNone) {
    return Invalid("rope", "unknown scaling");
  }
  if (config.style != RopeStyle::kNeox && config.style != RopeStyle::kGptj) {
    return Invalid("rope", "unknown style");
  }
  if (config.precision != AnglePrecision::kVllmFp32 && config.precision != AnglePrecision::kFp64) {
    return Invalid("rope", "unknown angle precision");
  }

  RopeTable table;
  table.config_ = config;
  const bool fp32 = config.precision == AnglePrecision::kVllmFp32;
  table.inv_freq_ = fp32 ? InvFreqFp32(config) : InvFreqFp64(config);
  const int64_t half = config.rotary_dim / 2;
  table.cos_sin_.resize(static_cast<size_t>(config.max_position * config.rotary_dim));
  for (int64_t p = 0; p < config.max_position; ++p) {
    float* row = table.cos_sin_.data() + p * config.rotary_dim;
    for (int64_t i = 0; i < half; ++i) {
      float c;
      float s;
      if (fp32) {
        const float angle = static_cast<float>(p) * static_cast<float>(table.inv_freq_[i]);
        c = std::cos(angle);
        s = std::sin(angle);
      } else {
        const double angle = static_cast<double>(p) * table.inv_freq_[i];
        c = static_cast<float>(std::cos(angle));
        s = static_cast<float>(std::sin(angle));
      }
      row[i] = RoundToDtype(c, config.table_dtype);
      row[half + i] = RoundToDtype(s, config.table_dtype);
    }
  }
  return table;
}

namespace internal {

absl::Status ValidateRopeTableView(const RopeTableView& view, std::string_view what) {
  STRATA_RETURN_IF_ERROR(CheckNotNull(view.cos_sin, what));
  if (view.rotary_dim < 2 || view.rotary_dim % 2 != 0 || view.rotary_dim > 65536) {
    return Invalid(what, fmt::format("rotary_dim {} is not even in [2, 65536]", view.rotary_dim));
  }
  if (view.max_position < 1 || view.max_position > (int64_t{1} << 24)) {
    return Invalid(what, fmt::format("max_position {} outside [1, 2^24]", view.max_position));
  }
  if (view.style != RopeStyle::kNeox && view.style != RopeStyle::kGptj) {
    return Invalid(what, "unknown style");
  }
  return absl::OkStatus();
}

absl::Status ValidateRopeViews(const RopeTableView& table, const ConstHeadsView& in,
                               const ConstHeadsView& out, bool in_place_allowed) {
  STRATA_RETURN_IF_ERROR(ValidateRopeTableView(table, "rope table"));
  STRATA_RETURN_IF_ERROR(ValidateHeads(in, /*writable=*/false, "rope input"));
  STRATA_RETURN_IF_ERROR(ValidateHeads(out, /*writable=*/true, "rope output"));
  if (in.dtype != out.dtype || in.num_tokens != out.num_tokens || in.num_heads != out.num_heads ||
      in.head_dim != out.head_dim) {
    return Invalid("rope", "input and output differ in dtype or shape");
  }
  if (table.rotary_dim > in.head_dim) {
    return Invalid("rope",
                   fmt::format("rotary_dim {} exceeds head_dim {}", table.rotary_dim, in.head_dim));
  }
  const bool same = in.data == out.data && in.token_stride == out.token_stride &&
                    in.head_stride == out.head_stride;
  if (!(same && in_place_allowed) && !Disjoint(in, out)) {
    return Invalid("rope", "input and output overlap without being the same view");
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::Status ApplyRope(const RopeTable& table, const ConstHeadsView& in, const HeadsView& out,
                       std::span<const int64_t> positions) {
  STRATA_RETURN_IF_ERROR(
      internal::ValidateRopeViews(table.view(), in, out, /*in_place_allowed=*/true));
  STRATA_RETURN_IF_ERROR(CheckPositions(table, positions, in.num_tokens, "rope positions"));
  DispatchFloatDtype(in.dtype,
                     [&](auto tag) { ApplyTyped<decltype(tag)>(table, in, out, positions); });
  return absl::OkStatus();
}

absl::Status ReRotateRope(const RopeTable& table, const HeadsView& x,
                          std::span<const int64_t> old_positions,
                          std::span<const int64_t> new_positions) {
  STRATA_RETURN_IF_ERROR(
      internal::ValidateRopeViews(table.view(), x, x, /*in_place_allowed=*/true));
  STRATA_RETURN_IF_ERROR(CheckPositions(table, old_positions, x.num_tokens, "old positions"));
  STRATA_RETURN_IF_ERROR(CheckPositions(table, new_positions, x.num_tokens, "new positions"));
  DispatchFloatDtype(x.dtype, [&](auto tag) {
    ReRotateTyped<decltype(tag)>(table, x, old_positions, new_positions);
  });
  return absl::OkStatus();
}

}  // namespace strata::kernels
