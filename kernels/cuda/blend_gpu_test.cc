// The CUDA CacheBlend deviation (within fp32 summation-order error) and selection (identical
// indices) against the CPU reference.
#include "kernels/cuda/blend.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"

namespace strata::kernels::cuda {
namespace {

using kernels::testing::HostTensor;
using testing::ToDevice;
using testing::ToHost;

TEST(BlendGpuTest, DeviationAndSelectionMatchCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  const int64_t tokens = 3000, channels = 1024, stride = 1030;
  std::mt19937_64 rng(31);
  HostTensor fresh(KvDtype::kBfloat16, tokens * channels),
      cached(KvDtype::kFloat32, tokens * stride);
  fresh.FillNormal(rng);
  cached.FillNormal(rng);
  const ConstMatrixView hf = ConstMatrixView::Dense(fresh.data(), fresh.dtype(), tokens, channels);
  const ConstMatrixView hc{cached.data(), cached.dtype(), tokens, channels, stride, cached.size()};
  std::vector<float> cpu(tokens);
  ASSERT_TRUE(kernels::TokenDeviation(hf, hc, cpu).ok());
  DeviceBuffer d_f = ToDevice(fresh), d_c = ToDevice(cached);
  auto d_dev = *DeviceBuffer::Allocate(tokens * 4);
  ConstMatrixView df = hf, dc = hc;
  df.data = d_f.data();
  dc.data = d_c.data();
  ASSERT_TRUE(cuda::TokenDeviation(df, dc, {d_dev.as<float>(), static_cast<size_t>(tokens)}).ok());
  testing::Sync();
  const std::vector<float> gpu = ToHost<float>(d_dev, tokens);
  for (int64_t t = 0; t < tokens; ++t) ASSERT_NEAR(gpu[t], cpu[t], 1e-5 * cpu[t]);
  // Selection on the same deviations (the GPU's), with and without ties.
  std::vector<float> tied(tokens);
  std::uniform_int_distribution<int> small(0, 9);
  for (auto& d : tied) d = static_cast<float>(small(rng));
  tied[5] = NAN;
  for (const std::vector<float>* dev : {&gpu, static_cast<const std::vector<float>*>(&tied)}) {
    DeviceBuffer d_in = ToDevice(*dev);
    for (int64_t suffix : {0, 1, 200}) {
      for (double ratio : {0.0, 0.15, 0.16, 0.5, 1.0}) {
        auto want = kernels::SelectBlendTokens(*dev, suffix, ratio);
        ASSERT_TRUE(want.ok());
        auto d_sel = *DeviceBuffer::Allocate(want->size() * 4 + 4);
        ASSERT_TRUE(cuda::SelectBlendTokens({d_in.as<const float>(), dev->size()}, suffix, ratio,
                                            {d_sel.as<int32_t>(), want->size()})
                        .ok());
        testing::Sync();
        ASSERT_EQ(ToHost<int32_t>(d_sel, want->size()), *want)
            << "suffix " << suffix << " ratio " << ratio;
      }
    }
  }
  auto d_sel = *DeviceBuffer::Allocate(4096);
  EXPECT_EQ(cuda::SelectBlendTokens({d_dev.as<const float>(), static_cast<size_t>(tokens)}, 10, 0.5,
                                    {d_sel.as<int32_t>(), 7})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      cuda::TokenDeviation(df, df, {d_dev.as<float>(), static_cast<size_t>(tokens - 1)}).code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kernels::cuda
