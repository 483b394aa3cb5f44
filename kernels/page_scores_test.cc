#include "kernels/page_scores.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/paged_attention.h"
#include "kernels/testing/test_util.h"

namespace strata::kernels {
namespace {

using testing::HostTensor;

struct Cache {
  PagedKvSpec spec;
  HostTensor k;
  PagedKvLayer layer;
};

Cache MakeCache(KvDtype dtype, int64_t blocks, int64_t block_size, int64_t heads, int64_t dim,
                uint64_t seed) {
  Cache c;
  c.spec = PagedKvSpec::Contiguous(dtype, 1, blocks, block_size, heads, dim);
  c.k = HostTensor(dtype, c.spec.PlaneExtentElems());
  std::mt19937_64 rng(seed);
  c.k.FillNormal(rng);
  c.layer = PagedKvLayer::FromSeparatePlanes(c.k.data(), c.k.size(), nullptr, 0);
  return c;
}

TEST(PageSummaryTest, MinMaxOverValidTokensOnly) {
  Cache c = MakeCache(KvDtype::kBfloat16, 6, 4, 2, 8, 1);
  std::vector<int32_t> pages = {5, 0, 3};
  std::vector<int32_t> tokens = {4, 4, 2};
  // Poison the unused slots of the partial page: they must not enter the summary.
  for (int64_t slot = 2; slot < 4; ++slot) {
    for (int64_t e = 0; e < 16; ++e) c.k.Set((3 * 4 + slot) * 16 + e, 1000.0f);
  }
  std::vector<float> summaries(3 * 2 * 2 * 8);
  ASSERT_TRUE(BuildPageSummaries({c.spec, c.layer, pages, tokens, {}, summaries}).ok());
  for (size_t p = 0; p < pages.size(); ++p) {
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t d = 0; d < 8; ++d) {
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t t = 0; t < tokens[p]; ++t) {
          const float v = c.k.Get((pages[p] * 4 + t) * 16 + h * 8 + d);
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
        EXPECT_EQ(summaries[((p * 2 + h) * 2 + 0) * 8 + d], lo);
        EXPECT_EQ(summaries[((p * 2 + h) * 2 + 1) * 8 + d], hi);
        EXPECT_LT(hi, 100.0f);
      }
    }
  }
}

// The Quest bound: s_p >= max_{t in p} q . k_t for every page and head (GQA max or sum over the
// group is >= each member's own bound), for post-RoPE keys and for the NoPE form.
TEST(PageScoreTest, ScoreIsAnUpperBoundOfEveryKeyInThePage) {
  const int64_t blocks = 12, bs = 16, kv_heads = 2, group = 3, dim = 32;
  for (bool nope : {false, true}) {
    for (GqaCombine combine : {GqaCombine::kMax, GqaCombine::kSum}) {
      Cache c = MakeCache(KvDtype::kFloat32, blocks, bs, kv_heads, dim, 2);
      RopeConfig rc;
      rc.rotary_dim = dim;
      rc.max_position = 1024;
      rc.precision = AnglePrecision::kFp64;
      const RopeTable table = *RopeTable::Create(rc);
      std::vector<int32_t> pages(blocks), tokens(blocks, bs);
      for (int64_t i = 0; i < blocks; ++i) pages[i] = static_cast<int32_t>(blocks - 1 - i);
      tokens.back() = 5;
      std::vector<int64_t> page_pos(blocks);
      for (int64_t j = 0; j < blocks; ++j)
        page_pos[j] = 100 + j * bs;  // pages start at position 100
      const int64_t query_pos = 100 + (blocks - 1) * bs + 4;
      std::vector<float> summaries(blocks * kv_heads * 2 * dim);
      ASSERT_TRUE(BuildPageSummaries({c.spec, c.layer, pages, tokens,
                                      nope ? table.view() : RopeTableView{}, summaries})
                      .ok());
      std::mt19937_64 rng(3);
      HostTensor q(KvDtype::kFloat32, kv_heads * group * dim);
      q.FillNormal(rng);
      std::vector<float> scores(kv_heads * blocks);
      PageScoreArgs args;
      args.q = ConstHeadsView::Dense(q.data(), q.dtype(), 1, kv_heads * group, dim);
      args.summaries = summaries;
      args.num_pages = blocks;
      args.num_kv_heads = kv_heads;
      args.combine = combine;
      args.scores = scores;
      if (nope) {
        args.rope = table.view();
        args.query_position = query_pos;
        args.page_positions = page_pos;
      }
      ASSERT_TRUE(ScorePages(args).ok());
      // Dense check: rotate q at its position and every key at its absolute position (NoPE), or
      // use them as they are (post-RoPE keys).
      const std::vector<double> inv = testing::InvFreqF64(rc);
      for (int64_t j = 0; j < blocks; ++j) {
        for (int64_t g = 0; g < kv_heads; ++g) {
          double best_combined = -INFINITY;
          double sum_of_maxes = 0;
          for (int64_t hh = 0; hh < group; ++hh) {
            std::vector<double> qv(dim);
            for (int64_t d = 0; d < dim; ++d) qv[d] = q.Get((g * group + hh) * dim + d);
            if (nope) testing::RopeF64(qv, rc, inv, static_cast<double>(query_pos));
            double best = -INFINITY;
            for (int64_t t = 0; t < tokens[j]; ++t) {
              std::vector<double> kv(dim);
              for (int64_t d = 0; d < dim; ++d)
                kv[d] = c.k.Get((pages[j] * bs + t) * kv_heads * dim + g * dim + d);
              if (nope) testing::RopeF64(kv, rc, inv, static_cast<double>(page_pos[j] + t));
              double dot = 0;
              for (int64_t d = 0; d < dim; ++d) dot += qv[d] * kv[d];
              best = std::max(best, dot);
            }
            best_combined = std::max(best_combined, best);
            sum_of_maxes += best;
          }
          const double s = scores[g * blocks + j];
          const double bound = combine == GqaCombine::kMax ? best_combined : sum_of_maxes;
          EXPECT_GE(s, bound - 1e-4) << "page " << j << " head " << g << " nope " << nope;
        }
      }
    }
  }
}

TEST(PageSelectTest, TopKKeepsLastPageAndBreaksTiesByIndex) {
  // Head 0: distinct scores; head 1: ties.
  const std::vector<float> scores = {0.5f, 3.0f, -1.0f, 2.0f, 9.0f, -5.0f,
                                     1.0f, 1.0f, 2.0f,  1.0f, 2.0f, 100.0f};
  std::vector<int32_t> selected(2 * 3);
  ASSERT_TRUE(SelectTopPages(scores, 2, 6, 3, /*keep_last_page=*/true, selected).ok());
  EXPECT_EQ(selected, (std::vector<int32_t>{1, 4, 5, 2, 4, 5}));
  ASSERT_TRUE(SelectTopPages(scores, 2, 6, 3, /*keep_last_page=*/false, selected).ok());
  EXPECT_EQ(selected, (std::vector<int32_t>{1, 3, 4, 2, 4, 5}));
  // A budget covering every page keeps all of them.
  std::vector<int32_t> all(2 * 6);
  ASSERT_TRUE(SelectTopPages(scores, 2, 6, 10, true, all).ok());
  EXPECT_EQ(all, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}));
  // Budget 1 with the last page kept: only the last page.
  std::vector<int32_t> one(2);
  ASSERT_TRUE(SelectTopPages(scores, 2, 6, 1, true, one).ok());
  EXPECT_EQ(one, (std::vector<int32_t>{5, 5}));
  EXPECT_EQ(SelectTopPages(scores, 2, 6, 0, true, one).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectTopPages(scores, 2, 6, 3, true, one).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectTopPages(scores, 2, 5, 1, true, one).code(), absl::StatusCode::kInvalidArgument);
}

TEST(PageSelectTest, FullBudgetEqualsDenseAttention) {
  // With every page selected, attention over the selected pages is dense attention: run the paged
  // kernel on a block table made of the selected pages and compare with the full table.
  const int64_t bs = 4, kv_heads = 1, dim = 8, seq_len = 22;
  const int64_t pages = (seq_len + bs - 1) / bs;
  PagedKvSpec spec = PagedKvSpec::Contiguous(KvDtype::kFloat32, 2, pages, bs, kv_heads, dim);
  std::mt19937_64 rng(4);
  HostTensor k(KvDtype::kFloat32, spec.PlaneExtentElems()), v(k.dtype(), k.size());
  HostTensor q(KvDtype::kFloat32, dim);
  k.FillNormal(rng);
  v.FillNormal(rng);
  q.FillNormal(rng);
  std::vector<int32_t> table(pages);
  for (int64_t i = 0; i < pages; ++i) table[i] = static_cast<int32_t>(i);
  std::vector<int32_t> tokens(pages, bs);
  tokens.back() = static_cast<int32_t>(seq_len - (pages - 1) * bs);
  std::vector<float> summaries(pages * kv_heads * 2 * dim), scores(pages);
  PagedKvLayer layer = PagedKvLayer::FromSeparatePlanes(k.data(), k.size(), v.data(), v.size());
  ASSERT_TRUE(BuildPageSummaries({spec, layer, table, tokens, {}, summaries}).ok());
  PageScoreArgs sa;
  sa.q = ConstHeadsView::Dense(q.data(), q.dtype(), 1, 1, dim);
  sa.summaries = summaries;
  sa.num_pages = pages;
  sa.num_kv_heads = 1;
  sa.scores = scores;
  ASSERT_TRUE(ScorePages(sa).ok());
  std::vector<int32_t> selected(pages);
  ASSERT_TRUE(SelectTopPages(scores, 1, pages, pages, true, selected).ok());
  std::vector<int32_t> selected_table;
  for (int32_t p : selected) selected_table.push_back(table[p]);
  auto run = [&](const std::vector<int32_t>& t) {
    HostTensor out(KvDtype::kFloat32, dim);
    PagedAttentionArgs a;
    a.q = ConstHeadsView::Dense(q.data(), q.dtype(), 1, 1, dim);
    a.out = HeadsView::Dense(out.data(), out.dtype(), 1, 1, dim);
    a.kv_spec = spec;
    a.kv = layer;
    a.block_table = t;
    a.max_blocks_per_seq = pages;
    const std::vector<int32_t> lens = {static_cast<int32_t>(seq_len)};
    const std::vector<int32_t> qsl = {0, 1};
    a.seq_lens = lens;
    a.query_start_loc = qsl;
    EXPECT_TRUE(PagedAttention(a).ok());
    return out.ToFloats();
  };
  EXPECT_EQ(run(selected_table), run(table));
}

TEST(PageScoreValidationTest, RejectsBadArguments) {
  Cache c = MakeCache(KvDtype::kFloat32, 4, 4, 1, 8, 5);
  std::vector<int32_t> pages = {0, 1}, tokens = {4, 4};
  std::vector<float> summaries(2 * 2 * 8);
  const auto code = absl::StatusCode::kInvalidArgument;
  EXPECT_TRUE(BuildPageSummaries({c.spec, c.layer, pages, tokens, {}, summaries}).ok());
  std::vector<int32_t> bad_pages = {0, 4};
  EXPECT_EQ(BuildPageSummaries({c.spec, c.layer, bad_pages, tokens, {}, summaries}).code(), code);
  std::vector<int32_t> bad_tokens = {0, 4};
  EXPECT_EQ(BuildPageSummaries({c.spec, c.layer, pages, bad_tokens, {}, summaries}).code(), code);
  bad_tokens = {5, 4};
  EXPECT_EQ(BuildPageSummaries({c.spec, c.layer, pages, bad_tokens, {}, summaries}).code(), code);
  EXPECT_EQ(BuildPageSummaries({c.spec, c.layer, pages, tokens, {}, std::span(summaries).first(31)})
                .code(),
            code);
  PagedKvLayer short_layer = c.layer;
  short_layer.extent_elems[0] -= 1;
  EXPECT_EQ(BuildPageSummaries({c.spec, short_layer, pages, tokens, {}, summaries}).code(), code);

  std::vector<float> q(2 * 8), scores(3);
  PageScoreArgs a;
  a.q = ConstHeadsView::Dense(q.data(), KvDtype::kFloat32, 1, 2, 8);
  a.summaries = summaries;
  a.num_pages = 2;
  a.num_kv_heads = 1;
  a.scores = std::span(scores);
  EXPECT_EQ(ScorePages(a).code(), code);  // scores must be [1 KV head][2 pages]
  std::vector<float> scores_ok(2);
  a.scores = scores_ok;
  EXPECT_TRUE(ScorePages(a).ok());
  RopeConfig rc;
  rc.rotary_dim = 8;
  rc.max_position = 16;
  const RopeTable table = *RopeTable::Create(rc);
  a.rope = table.view();
  std::vector<int64_t> pos = {0, 4};
  a.page_positions = pos;
  a.query_position = 7;
  EXPECT_TRUE(ScorePages(a).ok());
  pos[0] = -20;  // 27 positions away, beyond the table of 16
  EXPECT_EQ(ScorePages(a).code(), code);
  a.query_position = 16;
  EXPECT_EQ(ScorePages(a).code(), code);
}

}  // namespace
}  // namespace strata::kernels
