#include "kernels/blend.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/testing/test_util.h"
#include "kernels/topk.h"

namespace strata::kernels {
namespace {

using testing::HostTensor;

TEST(BlendTest, DeviationIsTheFp32SumOfSquaredDifferences) {
  const int64_t tokens = 40, channels = 96;
  std::mt19937_64 rng(1);
  for (KvDtype dtype : {KvDtype::kFloat32, KvDtype::kBfloat16, KvDtype::kFloat16}) {
    HostTensor fresh(dtype, tokens * channels), cached(KvDtype::kFloat32, tokens * 128);
    fresh.FillNormal(rng);
    cached.FillNormal(rng);  // strided: row stride 128
    std::vector<float> dev(tokens);
    ASSERT_TRUE(TokenDeviation(ConstMatrixView::Dense(fresh.data(), dtype, tokens, channels),
                               ConstMatrixView{cached.data(), cached.dtype(), tokens, channels, 128,
                                               cached.size()},
                               dev)
                    .ok());
    for (int64_t t = 0; t < tokens; ++t) {
      double want = 0;
      for (int64_t c = 0; c < channels; ++c) {
        const double d = double{fresh.Get(t * channels + c)} - cached.Get(t * 128 + c);
        want += d * d;
      }
      EXPECT_NEAR(dev[t], want, 1e-5 * want);
    }
  }
  std::vector<float> same(8 * 4, 1.5f), dev(8);
  ASSERT_TRUE(TokenDeviation(ConstMatrixView::Dense(same.data(), KvDtype::kFloat32, 8, 4),
                             ConstMatrixView::Dense(same.data(), KvDtype::kFloat32, 8, 4), dev)
                  .ok());
  for (float d : dev) EXPECT_EQ(d, 0.0f);
}

TEST(BlendTest, SelectionIsTopRatioPlusSuffix) {
  // 10 prefix tokens, 3 suffix tokens; ratio 0.3 selects floor(10 * 0.3) = 3.
  const std::vector<float> dev = {0.1f, 5.0f, 2.0f, 5.0f,  0.0f,  7.0f, 2.0f,
                                  1.0f, 5.0f, 0.3f, 99.0f, 99.0f, 99.0f};
  auto sel = SelectBlendTokens(dev, 3, 0.3);
  ASSERT_TRUE(sel.ok());
  // 7.0 (5), then the 5.0 tie broken by lower index: 1 and 3 (not 8).
  EXPECT_EQ(*sel, (std::vector<int32_t>{1, 3, 5, 10, 11, 12}));
  // r = 0: only the suffix (naive concatenation); r = 1: every token (full prefill).
  EXPECT_EQ(*SelectBlendTokens(dev, 3, 0.0), (std::vector<int32_t>{10, 11, 12}));
  std::vector<int32_t> all(13);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(*SelectBlendTokens(dev, 3, 1.0), all);
  EXPECT_EQ(*SelectBlendTokens(dev, 0, 1.0), all);
  EXPECT_EQ(*SelectBlendTokens(dev, 13, 0.5),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  // The reference code's count: floor in fp64 (0.29 * 100 = 28.999... -> 28).
  EXPECT_EQ(*BlendSelectionCount(100, 0, 0.29), 28);
  EXPECT_EQ(*BlendSelectionCount(116, 16, 0.16), 16);
  EXPECT_EQ(SelectBlendTokens(dev, 14, 0.5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectBlendTokens(dev, -1, 0.5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectBlendTokens(dev, 3, 1.5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectBlendTokens(dev, 3, NAN).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectBlendTokens({}, 0, 0.5).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BlendTest, SelectionMatchesAFullSortOnRandomData) {
  std::mt19937_64 rng(2);
  std::uniform_int_distribution<int> small(0, 5);  // many ties
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t n = 1 + trial * 7, suffix = trial % 4 < n ? trial % 4 : 0;
    std::vector<float> dev(static_cast<size_t>(n));
    for (auto& d : dev) d = static_cast<float>(small(rng));
    if (trial % 5 == 0) dev[0] = NAN;  // NaN ranks last
    const double ratio = (trial % 11) / 10.0;
    auto sel = SelectBlendTokens(dev, suffix, ratio);
    ASSERT_TRUE(sel.ok());
    std::vector<int32_t> order(static_cast<size_t>(n - suffix));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      const float x = std::isnan(dev[a]) ? -INFINITY : dev[a];
      const float y = std::isnan(dev[b]) ? -INFINITY : dev[b];
      if (x != y) return x > y;
      if (std::isnan(dev[a]) != std::isnan(dev[b])) return !std::isnan(dev[a]);
      return false;
    });
    const int64_t count = static_cast<int64_t>(std::floor(static_cast<double>(n - suffix) * ratio));
    std::vector<int32_t> want(order.begin(), order.begin() + count);
    std::sort(want.begin(), want.end());
    for (int64_t t = n - suffix; t < n; ++t) want.push_back(static_cast<int32_t>(t));
    ASSERT_EQ(*sel, want) << "trial " << trial;
  }
}

TEST(BlendTest, RejectsMismatchedShapes) {
  std::vector<float> a(6 * 4), b(5 * 4), dev(6);
  EXPECT_EQ(TokenDeviation(ConstMatrixView::Dense(a.data(), KvDtype::kFloat32, 6, 4),
                           ConstMatrixView::Dense(b.data(), KvDtype::kFloat32, 5, 4), dev)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TokenDeviation(ConstMatrixView::Dense(a.data(), KvDtype::kFloat32, 6, 4),
                           ConstMatrixView::Dense(a.data(), KvDtype::kFloat32, 6, 4),
                           std::span(dev).first(5))
                .code(),
            absl::StatusCode::kInvalidArgument);
  ConstMatrixView v = ConstMatrixView::Dense(a.data(), KvDtype::kFloat32, 6, 4);
  v.row_stride = 5;  // reaches past the 24 elements
  EXPECT_EQ(TokenDeviation(v, v, dev).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TopKTest, OrderIsScoreThenIndexWithNanLast) {
  const std::vector<float> s = {1.0f, NAN, -0.0f, 0.0f, INFINITY, -INFINITY, 1.0f};
  EXPECT_EQ(TopKIndices(s, 1), (std::vector<int32_t>{4}));
  EXPECT_EQ(TopKIndices(s, 3), (std::vector<int32_t>{0, 4, 6}));
  EXPECT_EQ(TopKIndices(s, 4), (std::vector<int32_t>{0, 2, 4, 6}));        // -0 == +0: lower index
  EXPECT_EQ(TopKIndices(s, 6), (std::vector<int32_t>{0, 2, 3, 4, 5, 6}));  // NaN last
  EXPECT_EQ(TopKIndices(s, 100).size(), 7u);
  EXPECT_TRUE(TopKIndices(s, 0).empty());
  EXPECT_TRUE(TopKIndices(s, -3).empty());
}

}  // namespace
}  // namespace strata::kernels
