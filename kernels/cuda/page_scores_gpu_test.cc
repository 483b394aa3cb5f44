// The CUDA page summaries, scores and top-K selection against the CPU reference: summaries exact
// without rotation (1e-6 with the in-block rotation), scores within 1e-5 relative, selections
// identical (same rank order, ties included).
#include "kernels/cuda/page_scores.h"

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/cuda/rope.h"

namespace strata::kernels::cuda {
namespace {

using kernels::testing::HostTensor;
using testing::ToDevice;
using testing::ToHost;

TEST(PageScoresGpuTest, SummariesAndScoresMatchCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  const int64_t blocks = 300, bs = 16, kv_heads = 4, group = 3, dim = 128;
  for (bool nope : {false, true}) {
    for (KvDtype dtype : {KvDtype::kBfloat16, KvDtype::kFloat32}) {
      const PagedKvSpec spec = PagedKvSpec::Contiguous(dtype, 1, blocks, bs, kv_heads, dim);
      std::mt19937_64 rng(21);
      HostTensor k(dtype, spec.PlaneExtentElems());
      k.FillNormal(rng);
      std::vector<int32_t> ids(blocks), tokens(blocks, bs);
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      tokens.back() = 7;
      RopeConfig rc;
      rc.rotary_dim = 96;  // partial rotary: dims 96..127 pass through
      rc.max_position = 8192;
      rc.precision = AnglePrecision::kFp64;
      const RopeTable table = *RopeTable::Create(rc);
      auto device_table = *DeviceRopeTable::Create(table);
      std::vector<float> summaries(blocks * kv_heads * 2 * dim);
      const PagedKvLayer host_layer =
          PagedKvLayer::FromSeparatePlanes(k.data(), k.size(), nullptr, 0);
      ASSERT_TRUE(kernels::BuildPageSummaries({spec, host_layer, ids, tokens,
                                               nope ? table.view() : RopeTableView{}, summaries})
                      .ok());
      DeviceBuffer d_k = ToDevice(k), d_ids = ToDevice(ids), d_tokens = ToDevice(tokens);
      auto d_summaries = *DeviceBuffer::Allocate(summaries.size() * 4);
      ASSERT_TRUE(cuda::BuildPageSummaries(
                      {spec,
                       PagedKvLayer::FromSeparatePlanes(d_k.data(), k.size(), nullptr, 0),
                       {d_ids.as<const int32_t>(), ids.size()},
                       {d_tokens.as<const int32_t>(), tokens.size()},
                       nope ? device_table.view() : RopeTableView{},
                       {d_summaries.as<float>(), summaries.size()}})
                      .ok());
      testing::Sync();
      const std::vector<float> got = ToHost<float>(d_summaries, summaries.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], summaries[i], nope ? 1e-5 * (1 + std::fabs(summaries[i])) : 0.0) << i;
      }
      // Scores from the CPU summaries (uploaded), query in bf16.
      HostTensor q(KvDtype::kBfloat16, kv_heads * group * dim);
      q.FillNormal(rng);
      std::vector<int64_t> page_pos(blocks);
      for (int64_t j = 0; j < blocks; ++j) page_pos[j] = j * bs;
      for (GqaCombine combine : {GqaCombine::kSum, GqaCombine::kMax}) {
        std::vector<float> scores(kv_heads * blocks);
        PageScoreArgs a;
        a.q = ConstHeadsView::Dense(q.data(), q.dtype(), 1, kv_heads * group, dim);
        a.summaries = summaries;
        a.num_pages = blocks;
        a.num_kv_heads = kv_heads;
        a.combine = combine;
        a.scores = scores;
        if (nope) {
          a.rope = table.view();
          a.query_position = blocks * bs - 200;  // some pages lie after the query: negative deltas
          a.page_positions = page_pos;
        }
        ASSERT_TRUE(kernels::ScorePages(a).ok());
        DeviceBuffer d_q = ToDevice(q), d_sum = ToDevice(summaries), d_pos = ToDevice(page_pos);
        auto d_scores = *DeviceBuffer::Allocate(scores.size() * 4);
        PageScoreArgs da = a;
        da.q.data = d_q.data();
        da.summaries = {d_sum.as<const float>(), summaries.size()};
        da.scores = {d_scores.as<float>(), scores.size()};
        if (nope) {
          da.rope = device_table.view();
          da.page_positions = {d_pos.as<const int64_t>(), page_pos.size()};
        }
        ASSERT_TRUE(cuda::ScorePages(da).ok());
        testing::Sync();
        const std::vector<float> gpu_scores = ToHost<float>(d_scores, scores.size());
        for (size_t i = 0; i < scores.size(); ++i) {
          ASSERT_NEAR(gpu_scores[i], scores[i], 1e-4 * (1 + std::fabs(scores[i]))) << i;
        }
      }
    }
  }
}

TEST(PageScoresGpuTest, SelectionIsIdenticalToCpu) {
  STRATA_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng(22);
  for (int64_t pages : {1, 2, 7, 64, 1000, 5000}) {
    for (bool ties : {false, true}) {
      const int64_t heads = 3;
      std::vector<float> scores(heads * pages);
      std::normal_distribution<float> normal;
      std::uniform_int_distribution<int> small(0, 4);
      for (auto& s : scores) s = ties ? static_cast<float>(small(rng)) : normal(rng);
      if (pages > 3) {
        scores[1] = NAN;
        scores[2] = -0.0f;
        scores[3] = 0.0f;
      }
      DeviceBuffer d_scores = ToDevice(scores);
      for (int64_t budget : {int64_t{1}, int64_t{3}, pages / 2 + 1, pages, pages + 5}) {
        for (bool keep_last : {false, true}) {
          const int64_t keep = std::min(budget, pages);
          std::vector<int32_t> cpu(heads * keep);
          ASSERT_TRUE(kernels::SelectTopPages(scores, heads, pages, budget, keep_last, cpu).ok());
          auto d_sel = *DeviceBuffer::Allocate(cpu.size() * 4 + 4);
          ASSERT_TRUE(cuda::SelectTopPages({d_scores.as<const float>(), scores.size()}, heads,
                                           pages, budget, keep_last,
                                           {d_sel.as<int32_t>(), cpu.size()})
                          .ok());
          testing::Sync();
          ASSERT_EQ(ToHost<int32_t>(d_sel, cpu.size()), cpu)
              << "pages " << pages << " budget " << budget << " keep_last " << keep_last << " ties "
              << ties;
        }
      }
    }
  }
}

TEST(PageScoresGpuTest, BadPageIdsAreFlagged) {
  STRATA_SKIP_WITHOUT_CUDA();
  const PagedKvSpec spec = PagedKvSpec::Contiguous(KvDtype::kFloat32, 1, 4, 4, 1, 8);
  auto k = *DeviceBuffer::Allocate(spec.PlaneExtentElems() * 4);
  const std::vector<int32_t> ids = {0, 9}, tokens = {4, 4};
  DeviceBuffer d_ids = ToDevice(ids), d_tokens = ToDevice(tokens), flags = testing::ErrorWord();
  auto d_summaries = *DeviceBuffer::Allocate(2 * 2 * 8 * 4);
  LaunchOptions options;
  options.error_flags = flags.as<uint32_t>();
  ASSERT_TRUE(cuda::BuildPageSummaries(
                  {spec,
                   PagedKvLayer::FromSeparatePlanes(k.data(), spec.PlaneExtentElems(), nullptr, 0),
                   {d_ids.as<const int32_t>(), 2},
                   {d_tokens.as<const int32_t>(), 2},
                   {},
                   {d_summaries.as<float>(), 32}},
                  options)
                  .ok());
  EXPECT_EQ(cuda::ReadDeviceErrors(flags.as<uint32_t>(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> got = ToHost<float>(d_summaries, 32);
  for (int i = 16; i < 32; ++i) EXPECT_TRUE(std::isnan(got[i]));
  EXPECT_EQ(cuda::BuildPageSummaries({spec,
                                      PagedKvLayer::FromSeparatePlanes(k.data(), 1, nullptr, 0),
                                      {d_ids.as<const int32_t>(), 2},
                                      {d_tokens.as<const int32_t>(), 2},
                                      {},
                                      {d_summaries.as<float>(), 32}})
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::kernels::cuda
