// The CUDA quantization kernels produce exactly the CPU reference's codes, scales, zeros and
// dequantized values.
#include "kernels/cuda/quant.h"

#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"

namespace strata::kernels::cuda {
namespace {

using kernels::testing::HostTensor;
using testing::ToDevice;
using testing::ToHost;

struct Case {
  QuantScheme scheme;
  QuantAxis axis;
  int bits;
  KvDtype dtype;
};

class QuantGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(QuantGpuTest, BitIdenticalToCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  const QuantParams params{c.scheme, c.axis, c.bits, 32};
  const int64_t rows = 256, cols = 512, stride = 520;
  std::mt19937_64 rng(11);
  HostTensor x(c.dtype, rows * stride);
  x.FillNormal(rng, 1.5f, 0.25f);
  for (int64_t cc = 0; cc < cols; ++cc) x.Set(3 * stride + cc, 2.0f);  // constant groups too
  const QuantizedSizes sizes = *QuantizedSizesFor(params, rows, cols);
  std::vector<uint32_t> codes(static_cast<size_t>(sizes.code_words));
  std::vector<float> scales(static_cast<size_t>(sizes.num_groups));
  std::vector<float> zeros(c.scheme == QuantScheme::kAsymmetric ? scales.size() : 0);
  const ConstMatrixView host_x{x.data(), c.dtype, rows, cols, stride, x.size()};
  ASSERT_TRUE(kernels::Quantize(params, host_x, codes, scales, zeros).ok());

  DeviceBuffer d_x = ToDevice(x);
  auto d_codes = *DeviceBuffer::Allocate(codes.size() * 4);
  auto d_scales = *DeviceBuffer::Allocate(scales.size() * 4);
  auto d_zeros = *DeviceBuffer::Allocate(std::max<size_t>(zeros.size(), 1) * 4);
  ConstMatrixView dev_x = host_x;
  dev_x.data = d_x.data();
  const std::span<float> dev_zeros(d_zeros.as<float>(), zeros.size());
  ASSERT_TRUE(cuda::Quantize(params, dev_x, {d_codes.as<uint32_t>(), codes.size()},
                             {d_scales.as<float>(), scales.size()}, dev_zeros)
                  .ok());
  testing::Sync();
  EXPECT_EQ(ToHost<uint32_t>(d_codes, codes.size()), codes);
  const std::vector<float> got_scales = ToHost<float>(d_scales, scales.size());
  EXPECT_EQ(std::memcmp(got_scales.data(), scales.data(), scales.size() * 4), 0);
  if (!zeros.empty()) {
    const std::vector<float> got_zeros = ToHost<float>(d_zeros, zeros.size());
    EXPECT_EQ(std::memcmp(got_zeros.data(), zeros.data(), zeros.size() * 4), 0);
  }
  // Dequantize into bf16 and fp32 on both sides.
  for (KvDtype out_dtype : {KvDtype::kFloat32, KvDtype::kBfloat16}) {
    HostTensor cpu(out_dtype, rows * cols);
    ASSERT_TRUE(kernels::Dequantize(params, codes, scales, zeros,
                                    MatrixView::Dense(cpu.data(), out_dtype, rows, cols))
                    .ok());
    auto d_out = *DeviceBuffer::Allocate(static_cast<size_t>(cpu.size_bytes()));
    ASSERT_TRUE(cuda::Dequantize(params, {d_codes.as<const uint32_t>(), codes.size()},
                                 {d_scales.as<const float>(), scales.size()},
                                 {d_zeros.as<const float>(), zeros.size()},
                                 MatrixView::Dense(d_out.data(), out_dtype, rows, cols))
                    .ok());
    testing::Sync();
    const HostTensor gpu = ToHost(d_out, out_dtype, rows * cols);
    EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), static_cast<size_t>(cpu.size_bytes())), 0)
        << DtypeName(out_dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Schemes, QuantGpuTest,
    ::testing::Values(Case{QuantScheme::kAsymmetric, QuantAxis::kPerChannel, 8, KvDtype::kBfloat16},
                      Case{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 8, KvDtype::kFloat16},
                      Case{QuantScheme::kAsymmetric, QuantAxis::kPerChannel, 4, KvDtype::kFloat32},
                      Case{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 4, KvDtype::kBfloat16},
                      Case{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 2, KvDtype::kFloat32},
                      Case{QuantScheme::kSymmetric, QuantAxis::kPerToken, 8, KvDtype::kBfloat16},
                      Case{QuantScheme::kSymmetric, QuantAxis::kPerChannel, 8, KvDtype::kFloat32}));

TEST(QuantGpuValidationTest, RejectsWhatTheCpuRejects) {
  STRATA_SKIP_WITHOUT_CUDA();
  auto buffer = *DeviceBuffer::Allocate(1 << 16);
  const QuantParams params{QuantScheme::kAsymmetric, QuantAxis::kPerToken, 4, 32};
  const ConstMatrixView x = ConstMatrixView::Dense(buffer.data(), KvDtype::kFloat32, 8, 64);
  std::span<uint32_t> codes(buffer.as<uint32_t>(), 64);
  std::span<float> scales(buffer.as<float>(), 16);
  EXPECT_EQ(cuda::Quantize(params, x, codes.first(63), scales, scales).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::Quantize(params, x, codes, scales.first(15), scales).code(),
            absl::StatusCode::kInvalidArgument);
  QuantParams three = params;
  three.bits = 3;
  EXPECT_EQ(cuda::Quantize(three, x, codes, scales, scales).code(),
            absl::StatusCode::kInvalidArgument);
  ConstMatrixView bad = x;
  bad.extent_elems = 511;
  EXPECT_EQ(cuda::Quantize(params, bad, codes, scales, scales).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kernels::cuda
