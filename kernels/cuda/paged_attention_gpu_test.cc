// The CUDA fused-RoPE paged attention against the dense fp64 reference (ALGORITHMS.md section 2
// tolerances: fp32 storage rtol = atol = 1e-5; bf16 / fp16 storage atol 2e-2 * max|V|) and against
// the CPU kernel, for prefill, append and decode batches, GQA, split-K decode, several head dims
// and block sizes, explicit block positions, a block shared at two offsets, blocks of a second
// cache, masked keys, and NaN tails.
#include "kernels/cuda/paged_attention.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/rope.h"

namespace strata::kernels::cuda {
namespace {

using kernels::testing::AttentionProblem;
using kernels::testing::AttentionShape;
using kernels::testing::HostTensor;
using testing::ToDevice;
using testing::ToHost;

// The problem's buffers on the device, and a run of the CUDA kernel.
struct DeviceProblem {
  DeviceBuffer k, v, q, out, table, seq_lens, qsl, qpos, bpos, mask, workspace, flags, shared_k,
      shared_v;
  std::optional<DeviceRopeTable> rope;

  explicit DeviceProblem(const AttentionProblem& p)
      : k(ToDevice(p.k)),
        v(ToDevice(p.v)),
        q(ToDevice(p.q)),
        table(ToDevice(p.block_table)),
        seq_lens(ToDevice(p.seq_lens)),
        qsl(ToDevice(p.query_start_loc)),
        qpos(ToDevice(p.query_positions)),
        flags(testing::ErrorWord()) {
    if (!p.block_positions.empty()) bpos = ToDevice(p.block_positions);
    if (!p.masked_keys.empty()) mask = ToDevice(p.masked_keys);
    if (p.shared_blocks > 0) {
      shared_k = ToDevice(p.shared_k);
      shared_v = ToDevice(p.shared_v);
    }
    if (p.rope) rope = *DeviceRopeTable::Create(*p.rope);
    out = *DeviceBuffer::Allocate(static_cast<size_t>(p.num_tokens() * p.q_heads * p.dim) * 4);
  }

  PagedAttentionArgs Args(const AttentionProblem& p, KvDtype out_dtype) {
    HostTensor dummy(KvDtype::kFloat32, 1);
    PagedAttentionArgs a = p.Args(dummy);
    a.q.data = q.data();
    a.out = HeadsView::Dense(out.data(), out_dtype, p.num_tokens(), p.q_heads, p.dim);
    a.kv = PagedKvLayer::FromSeparatePlanes(k.data(), p.k.size(), v.data(), p.v.size());
    if (p.shared_blocks > 0) {
      a.shared_kv = PagedKvLayer::FromSeparatePlanes(shared_k.data(), p.shared_k.size(),
                                                     shared_v.data(), p.shared_v.size());
    }
    a.block_table = {table.as<const int32_t>(), p.block_table.size()};
    a.seq_lens = {seq_lens.as<const int32_t>(), p.seq_lens.size()};
    a.query_start_loc = {qsl.as<const int32_t>(), p.query_start_loc.size()};
    a.query_positions = {qpos.as<const int64_t>(), p.query_positions.size()};
    if (!p.block_positions.empty()) {
      a.block_positions = {bpos.as<const int64_t>(), p.block_positions.size()};
    }
    if (!p.masked_keys.empty()) {
      a.masked_keys = {mask.as<const uint8_t>(), p.masked_keys.size()};
    }
    a.rope = rope ? rope->view() : RopeTableView{};
    return a;
  }

  // Runs the kernel and returns the fp32 output; the device error word must stay clear.
  HostTensor Run(const AttentionProblem& p) {
    PagedAttentionArgs a = Args(p, KvDtype::kFloat32);
    const size_t need = cuda::PagedAttentionWorkspaceBytes(a);
    if (need > workspace.size_bytes()) workspace = *DeviceBuffer::Allocate(need);
    LaunchOptions options;
    options.error_flags = flags.as<uint32_t>();
    const absl::Status s =
        cuda::PagedAttention(a, workspace.data(), workspace.size_bytes(), options);
    EXPECT_TRUE(s.ok()) << s;
    const absl::Status device = cuda::ReadDeviceErrors(flags.as<uint32_t>(), nullptr);
    EXPECT_TRUE(device.ok()) << device;
    return ToHost(out, KvDtype::kFloat32, p.num_tokens() * p.q_heads * p.dim);
  }
};

void ExpectClose(const HostTensor& got, const std::vector<double>& want, double atol, double rtol,
                 const char* what) {
  ASSERT_EQ(static_cast<size_t>(got.size()), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_LE(std::fabs(got.Get(static_cast<int64_t>(i)) - want[i]),
              atol + rtol * std::fabs(want[i]))
        << what << " element " << i << " got " << got.Get(static_cast<int64_t>(i)) << " want "
        << want[i];
  }
}

struct Case {
  AttentionShape shape;
  KvDtype kv_dtype;
};

class PagedAttentionGpuTest : public ::testing::TestWithParam<Case> {
 protected:
  void Check(const AttentionProblem& p) {
    DeviceProblem d(p);
    const HostTensor gpu = d.Run(p);
    const std::vector<double> want = p.Reference();
    HostTensor cpu;
    ASSERT_TRUE(p.Run(cpu).ok());
    if (p.kv_dtype == KvDtype::kFloat32) {
      ExpectClose(gpu, want, 1e-5, 1e-5, "gpu vs fp64");
      const std::vector<float> cpu_floats = cpu.ToFloats();
      const std::vector<double> cpu_values(cpu_floats.begin(), cpu_floats.end());
      ExpectClose(gpu, cpu_values, 1e-5, 1e-5, "gpu vs cpu");
    } else {
      double max_v = 0;
      for (int64_t i = 0; i < p.v.size(); ++i) {
        if (!std::isnan(p.v.Get(i))) max_v = std::max(max_v, double{std::fabs(p.v.Get(i))});
      }
      ExpectClose(gpu, want, 2e-2 * max_v, 0, "gpu vs fp64");
    }
  }
};

TEST_P(PagedAttentionGpuTest, PrefillAppendAndDecodeMatchReference) {
  STRATA_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  // An append (context 37, 20 new tokens), a full prefill, and two decode tokens.
  AttentionProblem p = kernels::testing::MakeAttentionProblem(
      c.shape, {{57, 20}, {45, 45}, {300, 1}, {1, 1}}, 1, c.kv_dtype);
  for (int64_t splits : {1, 3}) {
    p.splits = splits;
    Check(p);
  }
  p.causal = false;
  Check(p);
}

TEST_P(PagedAttentionGpuTest, SplitKDecodeOfLongSequences) {
  STRATA_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  AttentionProblem p = kernels::testing::MakeAttentionProblem(
      c.shape, {{1500, 1}, {700, 1}, {33, 1}, {2047, 1}}, 2, c.kv_dtype);
  for (int64_t splits : {1, 8, 32}) {
    p.splits = splits;
    Check(p);
  }
}

// MEPIC's block table over the engine's cache and a second one (the daemon's pool pages, HND
// strides): the blocks moved there are read in place; their old blocks hold NaN.
TEST_P(PagedAttentionGpuTest, BlocksOfASecondCache) {
  STRATA_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  const int32_t b = static_cast<int32_t>(c.shape.block_size);
  AttentionProblem p =
      kernels::testing::MakeAttentionProblem(c.shape, {{4 * b, 3}, {2 * b + 5, 1}}, 7, c.kv_dtype);
  p.MoveToSharedCache({{0, 1}, {0, 3}, {1, 0}});
  Check(p);
  p.splits = 3;
  Check(p);
}

// MEPIC's pads as masked keys: leading ones in a chunk's first block, trailing ones before the
// next, over both caches, split or not.
TEST_P(PagedAttentionGpuTest, MaskedKeys) {
  STRATA_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  const int32_t b = static_cast<int32_t>(c.shape.block_size);
  AttentionProblem p =
      kernels::testing::MakeAttentionProblem(c.shape, {{4 * b, b}, {2 * b + 5, 2}}, 9, c.kv_dtype);
  const size_t row = static_cast<size_t>(p.max_blocks * b);
  p.masked_keys.assign(p.seq_lens.size() * row, 0);
  for (int32_t t = 0; t < b / 2 + 1; ++t) p.masked_keys[static_cast<size_t>(t)] = 1;
  p.masked_keys[static_cast<size_t>(3 * b - 1)] = 1;
  p.masked_keys[row + static_cast<size_t>(b)] = 1;
  p.MoveToSharedCache({{0, 1}});
  Check(p);
  p.splits = 3;
  Check(p);
}

TEST_P(PagedAttentionGpuTest, BlockPositionsSharedBlocksAndShifts) {
  STRATA_SKIP_WITHOUT_CUDA();
  const Case& c = GetParam();
  const int32_t b = static_cast<int32_t>(c.shape.block_size);
  AttentionProblem p =
      kernels::testing::MakeAttentionProblem(c.shape, {{3 * b, 2}, {5 * b, 1}}, 3, c.kv_dtype);
  // A canonical block shared by both sequences at logical blocks 1 and 3.
  p.block_table[1 * p.max_blocks + 3] = p.block_table[0 * p.max_blocks + 1];
  Check(p);
  // Explicit block positions shifted by a constant (same output as the default ones).
  p.block_positions.assign(p.block_table.size(), 0);
  for (size_t s = 0; s < p.seq_lens.size(); ++s) {
    for (int64_t j = 0; j < p.max_blocks; ++j)
      p.block_positions[s * p.max_blocks + j] = j * b + 1000;
  }
  for (int64_t& x : p.query_positions) x += 1000;
  Check(p);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionGpuTest,
    ::testing::Values(Case{{16, 8, 4, 128, RopeStyle::kNeox}, KvDtype::kFloat32},
                      Case{{16, 8, 4, 128, RopeStyle::kNeox}, KvDtype::kBfloat16},
                      Case{{16, 2, 1, 64, RopeStyle::kGptj}, KvDtype::kFloat16},
                      Case{{5, 3, 6, 80, RopeStyle::kNeox}, KvDtype::kFloat32},
                      Case{{32, 1, 8, 256, RopeStyle::kNeox}, KvDtype::kBfloat16},
                      Case{{8, 2, 2, 32, RopeStyle::kGptj}, KvDtype::kFloat32}));

TEST(PagedAttentionGpuMiscTest, StandardAttentionWithoutRopeAndBf16Output) {
  STRATA_SKIP_WITHOUT_CUDA();
  AttentionProblem p = kernels::testing::MakeAttentionProblem({16, 4, 2, 64, RopeStyle::kNeox},
                                                              {{100, 7}, {64, 1}}, 4);
  p.rope.reset();
  DeviceProblem d(p);
  const HostTensor gpu = d.Run(p);
  const std::vector<double> want = p.Reference();
  ExpectClose(gpu, want, 1e-5, 1e-5, "no rope");
  // bf16 output: within one bf16 rounding of the fp64 reference.
  PagedAttentionArgs a = d.Args(p, KvDtype::kBfloat16);
  ASSERT_TRUE(cuda::PagedAttention(a, nullptr, 0).ok());
  const HostTensor bf16 = ToHost(d.out, KvDtype::kBfloat16, p.num_tokens() * p.q_heads * p.dim);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(bf16.Get(static_cast<int64_t>(i)), want[i], 1e-5 + std::fabs(want[i]) / 128);
  }
}

TEST(PagedAttentionGpuMiscTest, DeviceSideChecksAndHostSideRejections) {
  STRATA_SKIP_WITHOUT_CUDA();
  AttentionProblem p =
      kernels::testing::MakeAttentionProblem({4, 2, 2, 16, RopeStyle::kNeox}, {{10, 3}, {6, 1}}, 5);
  p.block_table[1] = static_cast<int32_t>(p.num_blocks);  // out of range: caught on the device
  DeviceProblem d(p);
  PagedAttentionArgs a = d.Args(p, KvDtype::kFloat32);
  LaunchOptions options;
  options.error_flags = d.flags.as<uint32_t>();
  ASSERT_TRUE(cuda::PagedAttention(a, nullptr, 0, options).ok());
  EXPECT_EQ(cuda::ReadDeviceErrors(d.flags.as<uint32_t>(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // query_start_loc that does not end at num_tokens (the last token would be left unwritten).
  p.block_table[1] = p.block_table[0];
  std::vector<int32_t> short_qsl = p.query_start_loc;
  short_qsl.back() -= 1;
  ASSERT_TRUE(d.table.CopyFromHost(p.block_table.data(), p.block_table.size() * 4).ok());
  ASSERT_TRUE(d.qsl.CopyFromHost(short_qsl.data(), short_qsl.size() * 4).ok());
  ASSERT_TRUE(cuda::PagedAttention(a, nullptr, 0, options).ok());
  EXPECT_EQ(cuda::ReadDeviceErrors(d.flags.as<uint32_t>(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(d.qsl.CopyFromHost(p.query_start_loc.data(), short_qsl.size() * 4).ok());
  ASSERT_TRUE(cuda::PagedAttention(a, nullptr, 0, options).ok());
  EXPECT_TRUE(cuda::ReadDeviceErrors(d.flags.as<uint32_t>(), nullptr).ok());
  // Host-side: a workspace too small for splits, head_dim above the CUDA limit, bad shapes.
  a.num_kv_splits = 4;
  EXPECT_EQ(cuda::PagedAttention(a, nullptr, 0).code(), absl::StatusCode::kInvalidArgument);
  a.num_kv_splits = 1;
  a.block_table = a.block_table.first(a.block_table.size() - 1);
  EXPECT_EQ(cuda::PagedAttention(a, nullptr, 0).code(), absl::StatusCode::kInvalidArgument);
  PagedAttentionArgs wide = d.Args(p, KvDtype::kFloat32);
  wide.q.head_dim = wide.out.head_dim = wide.kv_spec.head_dim = 512;
  EXPECT_EQ(cuda::PagedAttention(wide, nullptr, 0).code(), absl::StatusCode::kInvalidArgument);
  testing::Sync();
}

}  // namespace
}  // namespace strata::kernels::cuda
