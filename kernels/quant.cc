#include "kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/dtype.h"
#include "kernels/internal/validate.h"

namespace strata::kernels {
namespace {

using internal::Invalid;

int64_t GroupOf(const QuantParams& p, int64_t cols, int64_t r, int64_t c) {
  return p.axis == QuantAxis::kPerToken ? r * (cols / p.group_size) + c / p.group_size
                                        : (r / p.group_size) * cols + c;
}

absl::Status CheckBits(int bits) {
  if (bits != 1 && bits != 2 && bits != 4 && bits != 8 && bits != 16) {
    return Invalid("pack", fmt::format("bits {} is not 1, 2, 4, 8 or 16", bits));
  }
  return absl::OkStatus();
}

template <class T>
float At(const ConstMatrixView& x, int64_t r, int64_t c) {
  return ToFloat(static_cast<const T*>(x.data)[r * x.row_stride + c]);
}

}  // namespace

absl::StatusOr<QuantizedSizes> QuantizedSizesFor(const QuantParams& p, int64_t rows, int64_t cols) {
  if (p.scheme == QuantScheme::kAsymmetric) {
    if (p.bits != 2 && p.bits != 4 && p.bits != 8) {
      return Invalid("quant", fmt::format("asymmetric bits {} is not 2, 4 or 8", p.bits));
    }
  } else if (p.scheme == QuantScheme::kSymmetric) {
    if (p.bits != 8) return Invalid("quant", fmt::format("symmetric bits {} is not 8", p.bits));
  } else {
    return Invalid("quant", "unknown scheme");
  }
  if (p.axis != QuantAxis::kPerChannel && p.axis != QuantAxis::kPerToken) {
    return Invalid("quant", "unknown axis");
  }
  STRATA_RETURN_IF_ERROR(internal::CheckDim(p.group_size, "quant group_size"));
  STRATA_RETURN_IF_ERROR(internal::CheckDim(rows, "quant rows"));
  STRATA_RETURN_IF_ERROR(internal::CheckDim(cols, "quant cols"));
  const int64_t grouped = p.axis == QuantAxis::kPerToken ? cols : rows;
  if (grouped % p.group_size != 0) {
    return Invalid("quant", fmt::format("{} {} is not a multiple of group_size {}",
                                        p.axis == QuantAxis::kPerToken ? "cols" : "rows", grouped,
                                        p.group_size));
  }
  if ((cols * p.bits) % 32 != 0) {
    return Invalid("quant", fmt::format("cols {} * bits {} is not a multiple of 32", cols, p.bits));
  }
  STRATA_ASSIGN_OR_RETURN(const int64_t elems, internal::CheckedMul(rows, cols, "quant size"));
  if (elems > internal::kMaxDim) return Invalid("quant", "more than 2^31 elements");
  return QuantizedSizes{elems * p.bits / 32, elems / p.group_size};
}

namespace internal {

absl::Status ValidateQuantize(const QuantParams& params, const ConstMatrixView& x,
                              size_t code_words, size_t num_scales, size_t num_zeros) {
  STRATA_RETURN_IF_ERROR(ValidateMatrix(x, "quant input"));
  STRATA_ASSIGN_OR_RETURN(const QuantizedSizes sizes, QuantizedSizesFor(params, x.rows, x.cols));
  STRATA_RETURN_IF_ERROR(CheckSpanSize(code_words, sizes.code_words, "quant codes"));
  STRATA_RETURN_IF_ERROR(CheckSpanSize(num_scales, sizes.num_groups, "quant scales"));
  if (params.scheme == QuantScheme::kAsymmetric || num_zeros != 0) {
    STRATA_RETURN_IF_ERROR(CheckSpanSize(num_zeros, sizes.num_groups, "quant zeros"));
  }
  return absl::OkStatus();
}

absl::Status ValidateDequantize(const QuantParams& params, const ConstMatrixView& out,
                                size_t code_words, size_t num_scales, size_t num_zeros) {
  STRATA_RETURN_IF_ERROR(ValidateMatrix(out, "dequant output"));
  return ValidateQuantize(params, out, code_words, num_scales, num_zeros);
}

}  // namespace internal

absl::Status Quantize(const QuantParams& p, const ConstMatrixView& x, std::span<uint32_t> codes,
                      std::span<float> scales, std::span<float> zeros) {
  STRATA_RETURN_IF_ERROR(
      internal::ValidateQuantize(p, x, codes.size(), scales.size(), zeros.size()));
  const bool asymmetric = p.scheme == QuantScheme::kAsymmetric;
  const int64_t num_groups = static_cast<int64_t>(scales.size());
  std::vector<float> lo(static_cast<size_t>(num_groups), INFINITY);
  std::vector<float> hi(static_cast<size_t>(num_groups), -INFINITY);
  std::vector<float> values(static_cast<size_t>(x.rows * x.cols));
  DispatchFloatDtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t r = 0; r < x.rows; ++r) {
      for (int64_t c = 0; c < x.cols; ++c)
        values[static_cast<size_t>(r * x.cols + c)] = At<T>(x, r, c);
    }
  });
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t c = 0; c < x.cols; ++c) {
      const float v = values[static_cast<size_t>(r * x.cols + c)];
      const auto g = static_cast<size_t>(GroupOf(p, x.cols, r, c));
      if (asymmetric) {
        lo[g] = std::min(lo[g], v);
        hi[g] = std::max(hi[g], v);
      } else {
        hi[g] = std::max(hi[g], std::fabs(v));
      }
    }
  }
  const float levels = static_cast<float>((1 << p.bits) - 1);
  for (size_t g = 0; g < static_cast<size_t>(num_groups); ++g) {
    scales[g] = asymmetric ? (hi[g] - lo[g]) / levels : hi[g] / 127.0f;
    if (asymmetric) zeros[g] = lo[g];
  }
  const int per_word = 32 / p.bits;
  const int64_t words_per_row = x.cols / per_word;
  for (int64_t r = 0; r < x.rows; ++r) {
    for (int64_t w = 0; w < words_per_row; ++w) {
      uint32_t word = 0;
      for (int k = 0; k < per_word; ++k) {
        const int64_t c = w * per_word + k;
        const float v = values[static_cast<size_t>(r * x.cols + c)];
        const auto g = static_cast<size_t>(GroupOf(p, x.cols, r, c));
        const float scale = scales[g];
        uint32_t code = 0;
        if (asymmetric) {
          if (scale > 0) {
            const float q = std::rint((v - lo[g]) / scale);
            code = q >= 0.0f ? static_cast<uint32_t>(std::min(q, levels)) : 0u;  // NaN -> 0
          }
        } else if (scale > 0) {
          const float q = std::rint(v / scale);
          const float clamped = q == q ? std::clamp(q, -127.0f, 127.0f) : 0.0f;  // NaN -> 0
          code = static_cast<uint32_t>(static_cast<int32_t>(clamped)) & 0xffu;
        }
        word |= code << (k * p.bits);
      }
      codes[static_cast<size_t>(r * words_per_row + w)] = word;
    }
  }
  return absl::OkStatus();
}

absl::Status Dequantize(const QuantParams& p, std::span<const uint32_t> codes,
                        std::span<const float> scales, std::span<const float> zeros,
                        const MatrixView& out) {
  STRATA_RETURN_IF_ERROR(
      internal::ValidateDequantize(p, out, codes.size(), scales.size(), zeros.size()));
  const bool asymmetric = p.scheme == QuantScheme::kAsymmetric;
  const int per_word = 32 / p.bits;
  const uint32_t mask = (1u << p.bits) - 1u;
  const int64_t words_per_row = out.cols / per_word;
  DispatchFloatDtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t r = 0; r < out.rows; ++r) {
      T* row = static_cast<T*>(out.data) + r * out.row_stride;
      for (int64_t c = 0; c < out.cols; ++c) {
        const uint32_t word = codes[static_cast<size_t>(r * words_per_row + c / per_word)];
        const uint32_t code = (word >> ((c % per_word) * p.bits)) & mask;
        const auto g = static_cast<size_t>(GroupOf(p, out.cols, r, c));
        float v;
        if (asymmetric) {
          v = static_cast<float>(code) * scales[g] + zeros[g];
        } else {
          v = static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(code))) * scales[g];
        }
        row[c] = FromFloat<T>(v);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status PackCodes(int bits, std::span<const uint16_t> codes, std::span<uint32_t> packed) {
  STRATA_RETURN_IF_ERROR(CheckBits(bits));
  const size_t per_word = static_cast<size_t>(32 / bits);
  if (codes.size() % per_word != 0 || packed.size() != codes.size() / per_word) {
    return Invalid("pack", fmt::format("{} codes of {} bits do not fill {} words", codes.size(),
                                       bits, packed.size()));
  }
  const uint32_t limit = bits == 16 ? 0xffffu : (1u << bits) - 1u;
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i] > limit) {
      return Invalid("pack",
                     fmt::format("code {} at {} does not fit in {} bits", codes[i], i, bits));
    }
  }
  for (size_t w = 0; w < packed.size(); ++w) {
    uint32_t word = 0;
    for (size_t k = 0; k < per_word; ++k) {
      word |= static_cast<uint32_t>(codes[w * per_word + k]) << (k * static_cast<size_t>(bits));
    }
    packed[w] = word;
  }
  return absl::OkStatus();
}

absl::Status UnpackCodes(int bits, std::span<const uint32_t> packed, std::span<uint16_t> codes) {
  STRATA_RETURN_IF_ERROR(CheckBits(bits));
  const size_t per_word = static_cast<size_t>(32 / bits);
  if (codes.size() % per_word != 0 || packed.size() != codes.size() / per_word) {
    return Invalid("unpack", fmt::format("{} words do not hold {} codes of {} bits", packed.size(),
                                         codes.size(), bits));
  }
  const uint32_t mask = bits == 16 ? 0xffffu : (1u << bits) - 1u;
  for (size_t i = 0; i < codes.size(); ++i) {
    codes[i] = static_cast<uint16_t>((packed[i / per_word] >> ((i % per_word) * bits)) & mask);
  }
  return absl::OkStatus();
}

}  // namespace strata::kernels
