// Random, often invalid, values in device-resident metadata (block tables, sequence lengths, query
// offsets, positions, page ids): the kernels must never fault, must raise a device error flag
// exactly when the CPU reference rejects the same values, and must otherwise match the CPU result.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/page_scores.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rope.h"

namespace strata::kernels::cuda {
namespace {

using kernels::testing::HostTensor;
using testing::ToDevice;
using testing::ToHost;

constexpr int kIterations = 400;

TEST(RobustnessGpuTest, AttentionMetadata) {
  STRATA_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(1);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  int ok = 0, rejected = 0;
  for (int it = 0; it < kIterations; ++it) {
    kernels::testing::AttentionProblem p = kernels::testing::MakeAttentionProblem(
        {uniform(1, 8), uniform(1, 3), uniform(1, 3), 8 * uniform(1, 4),
         chance(0.5) ? RopeStyle::kNeox : RopeStyle::kGptj},
        {{static_cast<int32_t>(uniform(1, 40)), static_cast<int32_t>(uniform(1, 4))},
         {static_cast<int32_t>(uniform(4, 60)), 1},
         {static_cast<int32_t>(uniform(1, 20)), static_cast<int32_t>(uniform(0, 1))}},
        static_cast<uint64_t>(it));
    p.splits = uniform(1, 4);
    p.causal = chance(0.8);
    // Corrupt a few values (not the last query_start_loc entry, which sets the host-side token
    // count; PagedAttentionGpuMiscTest covers it).
    if (chance(0.2))
      p.block_table[uniform(0, p.block_table.size() - 1)] =
          static_cast<int32_t>(uniform(-3, p.num_blocks + 3));
    if (chance(0.15))
      p.seq_lens[uniform(0, 2)] =
          static_cast<int32_t>(uniform(-2, p.max_blocks * p.block_size + 3));
    if (chance(0.1)) p.query_start_loc[uniform(0, 2)] += static_cast<int32_t>(uniform(-2, 2));
    if (chance(0.15))
      p.query_positions[uniform(0, p.query_positions.size() - 1)] = uniform(-2, 4100);
    if (chance(0.2)) {
      p.block_positions.assign(p.block_table.size(), 0);
      for (auto& x : p.block_positions) x = uniform(-1, 4095);
    }
    HostTensor cpu;
    const absl::Status cpu_status = p.Run(cpu);
    ASSERT_TRUE(cpu_status.ok() || cpu_status.code() == absl::StatusCode::kInvalidArgument);

    DeviceBuffer k = ToDevice(p.k), v = ToDevice(p.v), q = ToDevice(p.q),
                 table = ToDevice(p.block_table), lens = ToDevice(p.seq_lens),
                 qsl = ToDevice(p.query_start_loc), qpos = ToDevice(p.query_positions),
                 flags = testing::ErrorWord();
    DeviceBuffer bpos;
    if (!p.block_positions.empty()) bpos = ToDevice(p.block_positions);
    auto rope = *DeviceRopeTable::Create(*p.rope);
    const int64_t out_elems = p.num_tokens() * p.q_heads * p.dim;
    HostTensor sentinel(KvDtype::kFloat32, out_elems);
    sentinel.Fill(0);
    DeviceBuffer out = ToDevice(sentinel);
    HostTensor dummy(KvDtype::kFloat32, 1);
    PagedAttentionArgs a = p.Args(dummy);
    a.q.data = q.data();
    a.out = HeadsView::Dense(out.data(), KvDtype::kFloat32, p.num_tokens(), p.q_heads, p.dim);
    a.kv = PagedKvLayer::FromSeparatePlanes(k.data(), p.k.size(), v.data(), p.v.size());
    a.block_table = {table.as<const int32_t>(), p.block_table.size()};
    a.seq_lens = {lens.as<const int32_t>(), p.seq_lens.size()};
    a.query_start_loc = {qsl.as<const int32_t>(), p.query_start_loc.size()};
    a.query_positions = {qpos.as<const int64_t>(), p.query_positions.size()};
    if (!p.block_positions.empty())
      a.block_positions = {bpos.as<const int64_t>(), p.block_positions.size()};
    a.rope = rope.view();
    auto workspace =
        *DeviceBuffer::Allocate(std::max<size_t>(cuda::PagedAttentionWorkspaceBytes(a), 4));
    LaunchOptions options;
    options.error_flags = flags.as<uint32_t>();
    const absl::Status launch =
        cuda::PagedAttention(a, workspace.data(), workspace.size_bytes(), options);
    ASSERT_TRUE(launch.ok()) << launch;  // only device-resident values were corrupted
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "iteration " << it;
    const absl::Status device = cuda::ReadDeviceErrors(flags.as<uint32_t>(), nullptr);
    ASSERT_EQ(device.ok(), cpu_status.ok())
        << "iteration " << it << " cpu: " << cpu_status << " device: " << device;
    if (!cpu_status.ok()) {
      ++rejected;
      continue;
    }
    ++ok;
    const HostTensor gpu = ToHost(out, KvDtype::kFloat32, out_elems);
    for (int64_t i = 0; i < out_elems; ++i) {
      // An in-range block id may name a block of NaN (unused slots): both sides give NaN then.
      if (std::isnan(cpu.Get(i))) {
        ASSERT_TRUE(std::isnan(gpu.Get(i))) << "iteration " << it;
        continue;
      }
      ASSERT_NEAR(gpu.Get(i), cpu.Get(i), 1e-5 + 1e-5 * std::fabs(cpu.Get(i)))
          << "iteration " << it;
    }
  }
  EXPECT_GT(ok, kIterations / 5);
  EXPECT_GT(rejected, kIterations / 10);
}

TEST(RobustnessGpuTest, RopeAndPageMetadata) {
  STRATA_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(2);
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  RopeConfig rc;
  rc.rotary_dim = 16;
  rc.max_position = 64;
  const RopeTable table = *RopeTable::Create(rc);
  auto device_table = *DeviceRopeTable::Create(table);
  for (int it = 0; it < kIterations; ++it) {
    // RoPE positions.
    const int64_t tokens = uniform(1, 20);
    HostTensor x(KvDtype::kFloat32, tokens * 2 * 16);
    x.FillNormal(rng);
    std::vector<int64_t> pos(tokens);
    for (auto& p : pos) p = uniform(0, 63);
    if (uniform(0, 3) == 0) pos[uniform(0, tokens - 1)] = uniform(0, 1) ? -1 : 64;
    HostTensor cpu = x;
    const HeadsView hv = HeadsView::Dense(cpu.data(), KvDtype::kFloat32, tokens, 2, 16);
    const absl::Status cpu_status = kernels::ApplyRope(table, hv, hv, pos);
    DeviceBuffer d_x = ToDevice(x), d_pos = ToDevice(pos), flags = testing::ErrorWord();
    const HeadsView dv = HeadsView::Dense(d_x.data(), KvDtype::kFloat32, tokens, 2, 16);
    LaunchOptions options;
    options.error_flags = flags.as<uint32_t>();
    ASSERT_TRUE(cuda::ApplyRope(device_table.view(), dv, dv,
                                {d_pos.as<const int64_t>(), pos.size()}, options)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cuda::ReadDeviceErrors(flags.as<uint32_t>(), nullptr).ok(), cpu_status.ok());
    if (cpu_status.ok()) {
      const HostTensor gpu = ToHost(d_x, KvDtype::kFloat32, x.size());
      for (int64_t i = 0; i < x.size(); ++i) ASSERT_NEAR(gpu.Get(i), cpu.Get(i), 1e-5);
    }
    // Page ids and token counts.
    const PagedKvSpec spec = PagedKvSpec::Contiguous(KvDtype::kFloat32, 1, 6, 4, 2, 16);
    HostTensor keys(KvDtype::kFloat32, spec.PlaneExtentElems());
    keys.FillNormal(rng);
    const int64_t pages = uniform(1, 6);
    std::vector<int32_t> ids(pages), counts(pages);
    for (auto& id : ids) id = static_cast<int32_t>(uniform(0, 5));
    for (auto& c : counts) c = static_cast<int32_t>(uniform(1, 4));
    if (uniform(0, 3) == 0)
      ids[uniform(0, pages - 1)] = static_cast<int32_t>(uniform(0, 1) ? -1 : 6);
    if (uniform(0, 5) == 0)
      counts[uniform(0, pages - 1)] = static_cast<int32_t>(uniform(0, 1) ? 0 : 5);
    std::vector<float> summaries(pages * 2 * 2 * 16);
    const bool nope = uniform(0, 1) == 1;
    const absl::Status cpu_summary = kernels::BuildPageSummaries(
        {spec, PagedKvLayer::FromSeparatePlanes(keys.data(), keys.size(), nullptr, 0), ids, counts,
         nope ? table.view() : RopeTableView{}, summaries});
    DeviceBuffer d_keys = ToDevice(keys), d_ids = ToDevice(ids), d_counts = ToDevice(counts);
    auto d_summaries = *DeviceBuffer::Allocate(summaries.size() * 4);
    ASSERT_TRUE(cuda::BuildPageSummaries(
                    {spec,
                     PagedKvLayer::FromSeparatePlanes(d_keys.data(), keys.size(), nullptr, 0),
                     {d_ids.as<const int32_t>(), ids.size()},
                     {d_counts.as<const int32_t>(), counts.size()},
                     nope ? device_table.view() : RopeTableView{},
                     {d_summaries.as<float>(), summaries.size()}},
                    options)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cuda::ReadDeviceErrors(flags.as<uint32_t>(), nullptr).ok(), cpu_summary.ok());
    if (cpu_summary.ok()) {
      const std::vector<float> gpu = ToHost<float>(d_summaries, summaries.size());
      for (size_t i = 0; i < gpu.size(); ++i) ASSERT_NEAR(gpu[i], summaries[i], 1e-5);
    }
  }
}

}  // namespace
}  // namespace strata::kernels::cuda
