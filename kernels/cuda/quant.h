// CUDA KIVI-style quantization (see kernels/quant.h for the scheme, grouping and storage). Inputs,
// codes, scales and zeros are device memory. The arithmetic is the CPU reference's, operation by
// operation with IEEE rounding and no fused multiply-add, so codes, scales, zeros and dequantized
// values are bit-identical to kernels::Quantize / Dequantize. Quantize refuses fp16_params
// (kInvalidArgument): the CPU computes those.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/cuda/device.h"
#include "kernels/quant.h"

namespace strata::kernels::cuda {

absl::Status Quantize(const QuantParams& params, const ConstMatrixView& x,
                      std::span<uint32_t> codes, std::span<float> scales, std::span<float> zeros,
                      const LaunchOptions& options = {});

absl::Status Dequantize(const QuantParams& params, std::span<const uint32_t> codes,
                        std::span<const float> scales, std::span<const float> zeros,
                        const MatrixView& out, const LaunchOptions& options = {});

}  // namespace strata::kernels::cuda
