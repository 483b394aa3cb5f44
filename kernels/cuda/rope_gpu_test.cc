// The CUDA RoPE kernels against the CPU reference (fp32: 1e-5 * max|x|; fp16 / bf16: one rounding
// apart at most), on strided views, both pairings, llama3 scaling and partial rotary dims.
#include "kernels/cuda/rope.h"

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

struct Case {
  KvDtype dtype;
  RopeStyle style;
  RopeScaling scaling;
  int64_t rotary_dim, head_dim;
};

class RopeGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(RopeGpuTest, ApplyAndReRotateMatchCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  RopeConfig config;
  config.rotary_dim = c.rotary_dim;
  config.style = c.style;
  config.scaling = c.scaling;
  config.theta = c.scaling == RopeScaling::kLlama3 ? 500000 : 10000;
  config.max_position = 32768;
  config.table_dtype = c.dtype;
  const RopeTable table = *RopeTable::Create(config);
  auto device_table = DeviceRopeTable::Create(table);
  ASSERT_TRUE(device_table.ok()) << device_table.status();
  // q inside a fused qkv row: token stride larger than heads * head_dim.
  const int64_t tokens = 300, heads = 6, dim = c.head_dim;
  const int64_t token_stride = heads * dim + 40, head_stride = dim;
  const int64_t extent = (tokens - 1) * token_stride + heads * dim;
  std::mt19937_64 rng(3);
  HostTensor x(c.dtype, extent);
  x.FillNormal(rng);
  std::vector<int64_t> pos(tokens), pos2(tokens);
  std::uniform_int_distribution<int64_t> any(0, 32767);
  for (int64_t t = 0; t < tokens; ++t) {
    pos[t] = any(rng);
    pos2[t] = any(rng);
  }
  const ConstHeadsView host_in{x.data(), c.dtype,      tokens,      heads,
                               dim,      token_stride, head_stride, extent};
  HostTensor cpu_out(c.dtype, extent);
  cpu_out.Fill(7.0f);
  const HostTensor untouched = cpu_out;
  const HeadsView host_out{cpu_out.data(), c.dtype,     tokens, heads, dim,
                           token_stride,   head_stride, extent};
  ASSERT_TRUE(kernels::ApplyRope(table, host_in, host_out, pos).ok());

  DeviceBuffer d_in = ToDevice(x), d_out = ToDevice(untouched), d_pos = ToDevice(pos),
               d_pos2 = ToDevice(pos2);
  ConstHeadsView dev_in = host_in;
  dev_in.data = d_in.data();
  HeadsView dev_out = host_out;
  dev_out.data = d_out.data();
  ASSERT_TRUE(cuda::ApplyRope(device_table->view(), dev_in, dev_out,
                              std::span(d_pos.as<const int64_t>(), tokens))
                  .ok());
  testing::Sync();
  double max_abs = 0;
  for (int64_t i = 0; i < x.size(); ++i) max_abs = std::max(max_abs, double{std::fabs(x.Get(i))});
  const double tol = c.dtype == KvDtype::kFloat32 ? 1e-5 * max_abs : 1.6e-2 * max_abs;
  HostTensor gpu = ToHost(d_out, c.dtype, extent);
  for (int64_t i = 0; i < extent; ++i) {
    ASSERT_NEAR(gpu.Get(i), cpu_out.Get(i), tol) << "element " << i;  // padding stays 7 on both
  }
  // Re-rotation in place, from pos to pos2.
  ASSERT_TRUE(kernels::ReRotateRope(table, host_out, pos, pos2).ok());
  ASSERT_TRUE(cuda::ReRotateRope(device_table->view(), dev_out,
                                 std::span(d_pos.as<const int64_t>(), tokens),
                                 std::span(d_pos2.as<const int64_t>(), tokens))
                  .ok());
  testing::Sync();
  gpu = ToHost(d_out, c.dtype, extent);
  for (int64_t i = 0; i < extent; ++i) ASSERT_NEAR(gpu.Get(i), cpu_out.Get(i), 2 * tol);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RopeGpuTest,
    ::testing::Values(Case{KvDtype::kFloat32, RopeStyle::kNeox, RopeScaling::kNone, 128, 128},
                      Case{KvDtype::kFloat32, RopeStyle::kGptj, RopeScaling::kLlama3, 64, 96},
                      Case{KvDtype::kBfloat16, RopeStyle::kNeox, RopeScaling::kLlama3, 128, 128},
                      Case{KvDtype::kFloat16, RopeStyle::kGptj, RopeScaling::kNone, 32, 64},
                      Case{KvDtype::kBfloat16, RopeStyle::kNeox, RopeScaling::kNone, 16, 80}));

TEST(RopeGpuValidationTest, BadPositionsAreFlaggedAndShapesRejected) {
  STRATA_SKIP_WITHOUT_CUDA();
  RopeConfig config;
  config.rotary_dim = 8;
  config.max_position = 16;
  const RopeTable table = *RopeTable::Create(config);
  auto device_table = DeviceRopeTable::Create(table);
  ASSERT_TRUE(device_table.ok());
  std::vector<float> x(3 * 8, 1.0f);
  DeviceBuffer d_x = ToDevice(x);
  const std::vector<int64_t> pos = {1, 16, 2};  // 16 is outside the table
  DeviceBuffer d_pos = ToDevice(pos), flags = testing::ErrorWord();
  const HeadsView v = HeadsView::Dense(d_x.data(), KvDtype::kFloat32, 3, 1, 8);
  LaunchOptions options;
  options.error_flags = flags.as<uint32_t>();
  ASSERT_TRUE(
      cuda::ApplyRope(device_table->view(), v, v, std::span(d_pos.as<const int64_t>(), 3), options)
          .ok());
  EXPECT_EQ(cuda::ReadDeviceErrors(flags.as<uint32_t>(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> got = ToHost<float>(d_x, x.size());
  for (int d = 0; d < 8; ++d) EXPECT_EQ(got[8 + d], 1.0f);  // the bad token is left alone
  std::vector<float> cpu = x;
  ASSERT_TRUE(kernels::ApplyRope(table, HeadsView::Dense(cpu.data(), KvDtype::kFloat32, 1, 1, 8),
                                 HeadsView::Dense(cpu.data(), KvDtype::kFloat32, 1, 1, 8),
                                 std::vector<int64_t>{1})
                  .ok());
  for (int d = 0; d < 8; ++d) EXPECT_NEAR(got[d], cpu[d], 1e-6);
  // Host-side checks: size mismatch, rotary_dim > head_dim, extent.
  EXPECT_EQ(
      cuda::ApplyRope(device_table->view(), v, v, std::span(d_pos.as<const int64_t>(), 2)).code(),
      absl::StatusCode::kInvalidArgument);
  const HeadsView narrow = HeadsView::Dense(d_x.data(), KvDtype::kFloat32, 3, 1, 6);
  EXPECT_EQ(
      cuda::ApplyRope(device_table->view(), narrow, narrow, std::span(d_pos.as<const int64_t>(), 3))
          .code(),
      absl::StatusCode::kInvalidArgument);
  HeadsView big = v;
  big.extent_elems = 23;
  EXPECT_EQ(cuda::ApplyRope(device_table->view(), big, big, std::span(d_pos.as<const int64_t>(), 3))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kernels::cuda
