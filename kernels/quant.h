// Integer quantization of KV (KIVI-style; ALGORITHMS.md section 5a): CPU reference.
//
// A matrix x [rows = tokens, cols = channels] is cut into groups of `group_size` elements, either
// along tokens for one channel (kPerChannel: KIVI's keys) or along channels of one token
// (kPerToken: KIVI's values). Per group:
//   asymmetric, b bits: scale = (max - min) / (2^b - 1), zero = min,
//                       q = clamp(rint((x - min) / scale), 0, 2^b - 1), x^ = q * scale + zero;
//                       a constant group (max == min) gets scale 0 and codes 0 (x^ = min exactly).
//   symmetric, 8 bits:  scale = max|x| / 127, q = clamp(rint(x / scale), -127, 127), x^ = q *
//   scale.
// rint rounds half to even, as torch.round. Arithmetic is fp32 with each operation rounded (no
// fused multiply-add), which the CUDA kernels reproduce bit for bit.
//
// Storage (all row-major):
//   codes:  element (r, c) has code index r * cols + c; codes are packed 32/bits per uint32, least
//           significant bits first (KIVI's packing), so one row is cols * bits / 32 words;
//           symmetric codes are stored as 8-bit two's complement.
//   scales, zeros: fp32, kPerToken [rows][cols / group_size], kPerChannel [rows /
//   group_size][cols];
//           zeros are unused (may be empty) for the symmetric scheme.
// Tokens that do not fill a whole group (the KIVI residual) are the caller's to keep unquantized:
// kPerChannel needs rows % group_size == 0, kPerToken needs cols % group_size == 0.
// Pure functions over caller-owned buffers; thread-safe when outputs are not shared.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/tensor_view.h"

namespace strata::kernels {

enum class QuantScheme : uint8_t { kAsymmetric = 1, kSymmetric = 2 };
enum class QuantAxis : uint8_t {
  kPerChannel = 1,  // a group is group_size consecutive tokens of one channel
  kPerToken = 2,    // a group is group_size consecutive channels of one token
};

struct QuantParams {
  QuantScheme scheme = QuantScheme::kAsymmetric;
  QuantAxis axis = QuantAxis::kPerToken;
  int bits = 8;             // asymmetric: 2, 4 or 8; symmetric: 8
  int64_t group_size = 32;  // >= 1
  // Asymmetric only: each group's zero and scale are fp16 values (still stored as fp32 here), so
  // that a caller may keep them as fp16: the zero is min rounded down to fp16, the scale
  // (max - zero) / (2^b - 1) rounded up, and the codes are computed from those (every element
  // stays within the levels: |x - x^| <= scale / 2 as before, with the rounded scale). A group
  // whose min or max lies outside fp16's finite range is kOutOfRange. CPU only.
  bool fp16_params = false;
};

// Buffer sizes for a [rows, cols] matrix.
struct QuantizedSizes {
  int64_t code_words = 0;  // uint32 words of packed codes
  int64_t num_groups = 0;  // entries of scales (and zeros)
};

// kInvalidArgument for unsupported bits / scheme combinations, a non-positive group size, shapes
// that do not divide into whole groups, or cols * bits not a multiple of 32.
absl::StatusOr<QuantizedSizes> QuantizedSizesFor(const QuantParams& params, int64_t rows,
                                                 int64_t cols);

// Quantizes x into codes / scales / zeros, whose sizes must equal QuantizedSizesFor (zeros may be
// empty for the symmetric scheme). kInvalidArgument, with nothing written, on any mismatch or bad
// view; kOutOfRange, with nothing written, for fp16_params beyond fp16's range. Non-finite inputs
// give unspecified (but in-bounds) codes.
absl::Status Quantize(const QuantParams& params, const ConstMatrixView& x,
                      std::span<uint32_t> codes, std::span<float> scales, std::span<float> zeros);

// Writes x^ into `out` (any float dtype, rounded once). Same size rules as Quantize.
absl::Status Dequantize(const QuantParams& params, std::span<const uint32_t> codes,
                        std::span<const float> scales, std::span<const float> zeros,
                        const MatrixView& out);

// Packs codes (each < 2^bits) 32/bits per word, LSB first; unpacks the reverse. codes.size() must
// be a multiple of 32/bits and packed.size() == codes.size() * bits / 32. bits: 1, 2, 4, 8, 16.
// kInvalidArgument on a size mismatch or (PackCodes) a code that does not fit in `bits`.
absl::Status PackCodes(int bits, std::span<const uint16_t> codes, std::span<uint32_t> packed);
absl::Status UnpackCodes(int bits, std::span<const uint32_t> packed, std::span<uint16_t> codes);

namespace internal {
// Shape / size checks shared with the CUDA entry points.
absl::Status ValidateQuantize(const QuantParams& params, const ConstMatrixView& x,
                              size_t code_words, size_t num_scales, size_t num_zeros);
absl::Status ValidateDequantize(const QuantParams& params, const ConstMatrixView& out,
                                size_t code_words, size_t num_scales, size_t num_zeros);

// The CPU code paths of Dequantize: the same loops built for the compiler's baseline instruction
// set and, on x86-64, for AVX2 (with F16C's fp16 conversions) and AVX-512, whose 16-bit outputs
// are written by SIMD row kernels (internal/dequantize_rows.h). Dequantize takes the fastest
// path the CPU has; the results are identical bit for bit (the tests compare them).
enum class DequantizePath : uint8_t { kBaseline = 1, kAvx2 = 2, kAvx512 = 3 };
bool DequantizePathAvailable(DequantizePath path);
// Dequantize on `path`; kFailedPrecondition when this CPU (or build) lacks it.
absl::Status DequantizeOnPath(DequantizePath path, const QuantParams& params,
                              std::span<const uint32_t> codes, std::span<const float> scales,
                              std::span<const float> zeros, const MatrixView& out);
// Quantize with its codes computed on `path` (the same paths, with the same guarantee; AVX-512
// computes them as AVX2 does); kFailedPrecondition when this CPU (or build) lacks it.
absl::Status QuantizeOnPath(DequantizePath path, const QuantParams& params,
                            const ConstMatrixView& x, std::span<uint32_t> codes,
                            std::span<float> scales, std::span<float> zeros);
}  // namespace internal

}  // namespace strata::kernels
