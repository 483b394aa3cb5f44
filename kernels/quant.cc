#include "kernels/quant.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <optional>
#include <vector>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/cpu_features.h"
#include "kernels/dtype.h"
#include "kernels/internal/dequantize_rows.h"
#include "kernels/internal/validate.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strata::kernels {
namespace {

using internal::DequantizePath;
using internal::DequantValue;
using internal::Invalid;

constexpr float kFp16Max = 65504.0f;

// The fp16 value nearest `v` toward +infinity (`up`) or -infinity, as its bits; |v| <= kFp16Max
// rounds to a finite value.
uint16_t FloatToFp16Directed(float v, bool up) {
  const uint16_t h = FloatToFp16Bits(v);
  const float back = Fp16BitsToFloat(h);
  if (up ? back >= v : back <= v) return h;
  const bool negative = (h & 0x8000u) != 0;
  if ((h & 0x7fffu) == 0) return up ? 0x0001u : 0x8001u;  // a zero: the smallest subnormal
  // One unit in the last place toward the direction: magnitudes grow away from zero.
  return static_cast<uint16_t>(up != negative ? h + 1 : h - 1);
}

absl::Status CheckBits(int bits) {
  if (bits != 1 && bits != 2 && bits != 4 && bits != 8 && bits != 16) {
    return Invalid("pack", fmt::format("bits {} is not 1, 2, 4, 8 or 16", bits));
  }
  return absl::OkStatus();
}

struct DequantizeArgs {
  const QuantParams& params;
  std::span<const uint32_t> codes;
  std::span<const float> scales;
  std::span<const float> zeros;
  const MatrixView& out;
};

#if defined(__x86_64__)
// fp16 to fp32 with F16C, eight at a time: exact, as ToFloat is (a NaN's payload may differ,
// which Quantize never reads: NaNs take no part in a group's range and get code 0).
[[gnu::target("avx2,f16c")]] void Fp16ToFloatsF16c(const Fp16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < n; ++i) out[i] = ToFloat(in[i]);
}
#endif

// Dequantize's loops, written so that the compiler vectorizes them: per row, the packed codes are
// spread to one byte per element, then each element is x^ of its code over contiguous
// spans of the row, its scale and zero constant along a group (kPerToken) or read from the group
// row (kPerChannel). Always inlined, so that each CPU path below compiles them for its own
// instruction set. On the SIMD paths (x86-64 only), rows are written from their packed codes by
// the row kernels of internal/dequantize_rows.h, sixteen elements at a time.
template <class T, int kBits, bool kAsymmetric, DequantizePath kPath>
[[gnu::always_inline]] inline void DequantizeRows(const DequantizeArgs& a) {
  static_assert(std::endian::native == std::endian::little, "codes are read as bytes");
  const int64_t cols = a.out.cols;
  const int64_t group_size = a.params.group_size;
  const bool per_token = a.params.axis == QuantAxis::kPerToken;
  const int64_t groups = cols / group_size;
  const auto* packed = reinterpret_cast<const uint8_t*>(a.codes.data());
  // The baseline's row of spread codes (the SIMD paths read them packed).
  std::vector<uint8_t> spread(
      kBits == 8 || kPath != DequantizePath::kBaseline ? 0 : static_cast<size_t>(cols));
  for (int64_t r = 0; r < a.out.rows; ++r) {
    const uint8_t* row_packed = packed + r * cols * kBits / 8;
    T* o = static_cast<T*>(a.out.data) + r * a.out.row_stride;
    const float* s =
        per_token ? a.scales.data() + r * groups : a.scales.data() + (r / group_size) * cols;
    const float* z = !kAsymmetric ? nullptr
                     : per_token  ? a.zeros.data() + r * groups
                                  : a.zeros.data() + (r / group_size) * cols;
#if defined(__x86_64__)
    if constexpr (kPath != DequantizePath::kBaseline) {
      const internal::DequantizeRowArgs row{.codes = row_packed,
                                            .bits = kBits,
                                            .scales = s,
                                            .zeros = z,
                                            .cols = cols,
                                            .group_size = group_size,
                                            .axis = a.params.axis,
                                            .asymmetric = kAsymmetric};
      if constexpr (kPath == DequantizePath::kAvx512) {
        internal::DequantizeRowAvx512(row, o);
      } else {
        internal::DequantizeRowAvx2(row, o);
      }
      continue;
    }
#endif
    const uint8_t* q = row_packed;
    if constexpr (kBits != 8) {
      // Byte by byte, each byte's codes LSB first (as CodeAt reads them): a loop the compiler
      // unrolls, where CodeAt per element costs a shift and a mask of its own.
      constexpr int kPerByte = 8 / kBits;
      for (int64_t j = 0; j < cols / kPerByte; ++j) {
        const unsigned byte = row_packed[j];
        for (int k = 0; k < kPerByte; ++k) {
          spread[j * kPerByte + k] =
              static_cast<uint8_t>((byte >> (k * kBits)) & ((1u << kBits) - 1u));
        }
      }
      q = spread.data();
    }
    if (per_token) {
      for (int64_t g = 0; g < groups; ++g) {
        const float scale = s[g], zero = kAsymmetric ? z[g] : 0.0f;
        const uint8_t* gq = q + g * group_size;
        T* go = o + g * group_size;
        for (int64_t k = 0; k < group_size; ++k) {
          go[k] = FromFloat<T>(DequantValue<kAsymmetric>(gq[k], scale, zero));
        }
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) {
        o[c] = FromFloat<T>(DequantValue<kAsymmetric>(q[c], s[c], kAsymmetric ? z[c] : 0.0f));
      }
    }
  }
}

template <class T, DequantizePath kPath>
[[gnu::always_inline]] inline void DequantizeAs(const DequantizeArgs& a) {
  if (a.params.scheme == QuantScheme::kSymmetric) {
    DequantizeRows<T, 8, false, kPath>(a);
  } else if (a.params.bits == 8) {
    DequantizeRows<T, 8, true, kPath>(a);
  } else if (a.params.bits == 4) {
    DequantizeRows<T, 4, true, kPath>(a);
  } else {
    DequantizeRows<T, 2, true, kPath>(a);
  }
}

template <DequantizePath kPath>
[[gnu::always_inline]] inline void DequantizeAny(const DequantizeArgs& a) {
  switch (a.out.dtype) {
    case KvDtype::kBfloat16:
      DequantizeAs<Bf16, kPath>(a);
      break;
    case KvDtype::kFloat16:
      DequantizeAs<Fp16, kPath>(a);
      break;
    default:
      DequantizeAs<float, kPath>(a);
  }
}

// The CPU paths: the same loops compiled for the baseline instruction set and, on x86-64, for
// AVX2 with F16C's fp16 conversions and for AVX-512. All run the same fp32 operations (no
// contraction into fused multiply-adds: the library builds with -ffp-contract=off), so their
// results are identical bit for bit.
using DequantizeFn = void (*)(const DequantizeArgs&);

void DequantizeBaseline(const DequantizeArgs& a) { DequantizeAny<DequantizePath::kBaseline>(a); }

#if defined(__x86_64__)
[[gnu::target("avx2,f16c")]] void DequantizeAvx2(const DequantizeArgs& a) {
  DequantizeAny<DequantizePath::kAvx2>(a);
}
[[gnu::target("avx512f,avx2,f16c")]] void DequantizeAvx512(const DequantizeArgs& a) {
  DequantizeAny<DequantizePath::kAvx512>(a);
}
#endif

// The function of `path`, or null when this build or CPU lacks it.
DequantizeFn PathFunction(DequantizePath path) {
  switch (path) {
    case DequantizePath::kBaseline:
      return DequantizeBaseline;
#if defined(__x86_64__)
    case DequantizePath::kAvx2:
      return HasAvx2F16c() ? DequantizeAvx2 : nullptr;
    case DequantizePath::kAvx512:
      return HasAvx2F16c() && HasAvx512f() ? DequantizeAvx512 : nullptr;
#endif
    default:
      return nullptr;
  }
}

// The fastest path this CPU has.
DequantizePath FastestPath() {
  static const DequantizePath fastest = [] {
    for (const DequantizePath path : {DequantizePath::kAvx512, DequantizePath::kAvx2}) {
      if (PathFunction(path) != nullptr) return path;
    }
    return DequantizePath::kBaseline;
  }();
  return fastest;
}

// Quantize's last step: the codes of x's values (already fp32, row-major) from their groups'
// lows and scales.
struct CodesArgs {
  const QuantParams& params;
  int64_t rows;
  int64_t cols;
  const std::vector<float>& values;  // rows x cols
  const std::vector<float>& lo;      // per group
  std::span<const float> scales;     // per group
  std::span<uint32_t> codes;
};

// One element's code: (v - lo) / scale rounded to the nearest level (asymmetric), or v / scale
// rounded into [-127, 127] as a byte (symmetric); 0 for a group whose scale is not positive and
// for a NaN.
template <bool kAsymmetric>
[[gnu::always_inline]] inline uint8_t CodeOf(float v, float lo, float scale, float levels) {
  if constexpr (kAsymmetric) {
    const float q = std::rint((v - lo) / scale);
    return scale > 0 && q >= 0.0f ? static_cast<uint8_t>(static_cast<int32_t>(std::min(q, levels)))
                                  : uint8_t{0};
  } else {
    const float q = std::rint(v / scale);
    const float clamped = scale > 0 && q == q ? std::clamp(q, -127.0f, 127.0f) : 0.0f;
    return static_cast<uint8_t>(static_cast<int32_t>(clamped));
  }
}

// The codes, written so that the compiler vectorizes them (as Dequantize's loops): per row, one
// byte per element over contiguous spans, its low and scale constant along a group (kPerToken) or
// read from the group row (kPerChannel), then packed kBits at a time, LSB first (8-bit codes are
// the words' bytes already). Always inlined, so each CPU path compiles them for its own
// instruction set; with AVX2, rint is one instruction instead of a call.
template <int kBits, bool kAsymmetric>
[[gnu::always_inline]] inline void CodesRows(const CodesArgs& a) {
  static_assert(std::endian::native == std::endian::little, "codes are written as bytes");
  constexpr int kPerByte = 8 / kBits;
  const int64_t group_size = a.params.group_size;
  const int64_t rows = a.rows, cols = a.cols;
  const float levels = static_cast<float>((1 << kBits) - 1);
  auto* packed = reinterpret_cast<uint8_t*>(a.codes.data());
  std::vector<uint8_t> spread(kBits == 8 ? 0 : static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = a.values.data() + r * cols;
    uint8_t* row_packed = packed + r * cols / kPerByte;
    uint8_t* q = kBits == 8 ? row_packed : spread.data();
    if (a.params.axis == QuantAxis::kPerToken) {
      const int64_t groups = cols / group_size;
      for (int64_t g = 0; g < groups; ++g) {
        const float lo = kAsymmetric ? a.lo[static_cast<size_t>(r * groups + g)] : 0.0f;
        const float scale = a.scales[static_cast<size_t>(r * groups + g)];
        for (int64_t k = g * group_size; k < (g + 1) * group_size; ++k) {
          q[k] = CodeOf<kAsymmetric>(v[k], lo, scale, levels);
        }
      }
    } else {
      const float* lo = a.lo.data() + (r / group_size) * cols;
      const float* scale = a.scales.data() + (r / group_size) * cols;
      for (int64_t c = 0; c < cols; ++c) {
        q[c] = CodeOf<kAsymmetric>(v[c], kAsymmetric ? lo[c] : 0.0f, scale[c], levels);
      }
    }
    if constexpr (kBits != 8) {
      for (int64_t j = 0; j < cols / kPerByte; ++j) {
        unsigned byte = 0;
        for (int k = 0; k < kPerByte; ++k) byte |= unsigned{q[j * kPerByte + k]} << (k * kBits);
        row_packed[j] = static_cast<uint8_t>(byte);
      }
    }
  }
}

[[gnu::always_inline]] inline void CodesAny(const CodesArgs& a) {
  if (a.params.scheme == QuantScheme::kSymmetric) {
    CodesRows<8, false>(a);
  } else if (a.params.bits == 8) {
    CodesRows<8, true>(a);
  } else if (a.params.bits == 4) {
    CodesRows<4, true>(a);
  } else {
    CodesRows<2, true>(a);
  }
}

// Quantize's first step: x's values in fp32, row-major, into `out` (rows x cols). With kAvx2, fp16
// rows convert with F16C.
template <bool kAvx2>
[[gnu::always_inline]] inline void ToFloatsAny(const ConstMatrixView& x, float* out) {
  DispatchFloatDtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t r = 0; r < x.rows; ++r) {
      const T* row = static_cast<const T*>(x.data) + r * x.row_stride;
      float* row_out = out + r * x.cols;
#if defined(__x86_64__)
      if constexpr (kAvx2 && std::is_same_v<T, Fp16>) {
        Fp16ToFloatsF16c(row, row_out, x.cols);
        continue;
      }
#endif
      for (int64_t c = 0; c < x.cols; ++c) row_out[c] = ToFloat(row[c]);
    }
  });
}

// Quantize's per-element steps on one CPU path.
struct QuantizeSteps {
  void (*to_floats)(const ConstMatrixView& x, float* out);
  void (*codes)(const CodesArgs& a);
};
void ToFloatsBaseline(const ConstMatrixView& x, float* out) { ToFloatsAny<false>(x, out); }
void CodesBaseline(const CodesArgs& a) { CodesAny(a); }
#if defined(__x86_64__)
[[gnu::target("avx2,f16c")]] void ToFloatsAvx2(const ConstMatrixView& x, float* out) {
  ToFloatsAny<true>(x, out);
}
[[gnu::target("avx2")]] void CodesAvx2(const CodesArgs& a) { CodesAny(a); }
#endif

// Quantize's steps on `path` (DequantizePath names Quantize's paths too; the AVX-512 path
// quantizes with AVX2's steps), or nullopt when this build or CPU lacks it.
std::optional<QuantizeSteps> QuantizePathSteps(DequantizePath path) {
  if (PathFunction(path) == nullptr) return std::nullopt;
  if (path == DequantizePath::kBaseline) return QuantizeSteps{ToFloatsBaseline, CodesBaseline};
#if defined(__x86_64__)
  return QuantizeSteps{ToFloatsAvx2, CodesAvx2};
#else
  return std::nullopt;
#endif
}

}  // namespace

absl::StatusOr<QuantizedSizes> QuantizedSizesFor(const QuantParams& p, int64_t rows, int64_t cols) {
  if (p.scheme == QuantScheme::kAsymmetric) {
    if (p.bits != 2 && p.bits != 4 && p.bits != 8) {
      return Invalid("quant", fmt::format("asymmetric bits {} is not 2, 4 or 8", p.bits));
    }
  } else if (p.scheme == QuantScheme::kSymmetric) {
    if (p.bits != 8) return Invalid("quant", fmt::format("symmetric bits {} is not 8", p.bits));
    if (p.fp16_params) return Invalid("quant", "fp16_params is for the asymmetric scheme");
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

namespace {

// Quantize with the per-element steps of one path; the arguments are valid.
absl::Status QuantizeWith(const QuantizeSteps& steps, const QuantParams& p,
                          const ConstMatrixView& x, std::span<uint32_t> codes,
                          std::span<float> scales, std::span<float> zeros) {
  const bool asymmetric = p.scheme == QuantScheme::kAsymmetric;
  const int64_t num_groups = static_cast<int64_t>(scales.size());
  std::vector<float> lo(static_cast<size_t>(num_groups), INFINITY);
  std::vector<float> hi(static_cast<size_t>(num_groups), -INFINITY);
  std::vector<float> values(static_cast<size_t>(x.rows * x.cols));
  steps.to_floats(x, values.data());
  // Each group's low and high (asymmetric) or largest magnitude, its elements taken in order: a
  // row's groups of consecutive channels (kPerToken) one after the other, or a group row's
  // channels side by side, row after row (kPerChannel).
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* v = values.data() + r * x.cols;
    if (p.axis == QuantAxis::kPerToken) {
      const int64_t groups = x.cols / p.group_size;
      for (int64_t g = 0; g < groups; ++g) {
        float group_lo = INFINITY, group_hi = -INFINITY;
        const int64_t end = (g + 1) * p.group_size;
        if (asymmetric) {
          for (int64_t c = g * p.group_size; c < end; ++c) {
            group_lo = std::min(group_lo, v[c]);
            group_hi = std::max(group_hi, v[c]);
          }
        } else {
          // The largest magnitude does not depend on the order it is taken in (magnitudes are
          // never -0, and a NaN is never taken), so it is taken 8 lanes at a time.
          std::array<float, 8> lanes;
          lanes.fill(-INFINITY);
          int64_t c = g * p.group_size;
          for (; c + 8 <= end; c += 8) {
            for (size_t j = 0; j < 8; ++j) lanes[j] = std::max(lanes[j], std::fabs(v[c + j]));
          }
          for (; c < end; ++c) lanes[0] = std::max(lanes[0], std::fabs(v[c]));
          for (const float lane : lanes) group_hi = std::max(group_hi, lane);
        }
        lo[static_cast<size_t>(r * groups + g)] = group_lo;
        hi[static_cast<size_t>(r * groups + g)] = group_hi;
      }
    } else {
      float* row_lo = lo.data() + (r / p.group_size) * x.cols;
      float* row_hi = hi.data() + (r / p.group_size) * x.cols;
      for (int64_t c = 0; c < x.cols; ++c) {
        if (asymmetric) {
          row_lo[c] = std::min(row_lo[c], v[c]);
          row_hi[c] = std::max(row_hi[c], v[c]);
        } else {
          row_hi[c] = std::max(row_hi[c], std::fabs(v[c]));
        }
      }
    }
  }
  const float levels = static_cast<float>((1 << p.bits) - 1);
  if (p.fp16_params) {
    for (size_t g = 0; g < static_cast<size_t>(num_groups); ++g) {
      if (!(lo[g] >= -kFp16Max && hi[g] <= kFp16Max)) {
        return absl::OutOfRangeError(fmt::format(
            "quant: group {} spans [{}, {}], beyond fp16's range for its zero and scale", g, lo[g],
            hi[g]));
      }
    }
    for (size_t g = 0; g < static_cast<size_t>(num_groups); ++g) {
      lo[g] = Fp16BitsToFloat(FloatToFp16Directed(lo[g], /*up=*/false));
      scales[g] = Fp16BitsToFloat(FloatToFp16Directed((hi[g] - lo[g]) / levels, /*up=*/true));
      zeros[g] = lo[g];
    }
  } else {
    for (size_t g = 0; g < static_cast<size_t>(num_groups); ++g) {
      scales[g] = asymmetric ? (hi[g] - lo[g]) / levels : hi[g] / 127.0f;
      if (asymmetric) zeros[g] = lo[g];
    }
  }
  steps.codes(CodesArgs{p, x.rows, x.cols, values, lo, scales, codes});
  return absl::OkStatus();
}

}  // namespace

absl::Status Quantize(const QuantParams& p, const ConstMatrixView& x, std::span<uint32_t> codes,
                      std::span<float> scales, std::span<float> zeros) {
  return internal::QuantizeOnPath(FastestPath(), p, x, codes, scales, zeros);
}

namespace internal {

absl::Status QuantizeOnPath(DequantizePath path, const QuantParams& p, const ConstMatrixView& x,
                            std::span<uint32_t> codes, std::span<float> scales,
                            std::span<float> zeros) {
  const std::optional<QuantizeSteps> steps = QuantizePathSteps(path);
  if (!steps.has_value()) {
    return absl::FailedPreconditionError("quantize: this CPU path is not available");
  }
  STRATA_RETURN_IF_ERROR(ValidateQuantize(p, x, codes.size(), scales.size(), zeros.size()));
  return QuantizeWith(*steps, p, x, codes, scales, zeros);
}

bool DequantizePathAvailable(DequantizePath path) { return PathFunction(path) != nullptr; }

absl::Status DequantizeOnPath(DequantizePath path, const QuantParams& p,
                              std::span<const uint32_t> codes, std::span<const float> scales,
                              std::span<const float> zeros, const MatrixView& out) {
  const DequantizeFn dequantize = PathFunction(path);
  if (dequantize == nullptr) {
    return absl::FailedPreconditionError("dequantize: this CPU path is not available");
  }
  STRATA_RETURN_IF_ERROR(ValidateDequantize(p, out, codes.size(), scales.size(), zeros.size()));
  dequantize(DequantizeArgs{p, codes, scales, zeros, out});
  return absl::OkStatus();
}

}  // namespace internal

absl::Status Dequantize(const QuantParams& p, std::span<const uint32_t> codes,
                        std::span<const float> scales, std::span<const float> zeros,
                        const MatrixView& out) {
  return internal::DequantizeOnPath(FastestPath(), p, codes, scales, zeros, out);
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
