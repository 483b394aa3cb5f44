// The oracle of issue 17 (tests/support/tiny_transformer.h) checked against itself and against
// ALGORITHMS.md section 3's invariants: chunked prefill equals full prefill; a NoPE cache with
// fused RoPE equals standard RoPE attention; recomputed blocks equal full prefill's; and reusing a
// chunk computed elsewhere deviates from full prefill by an amount that recomputing its tokens
// removes.
#include "tests/support/tiny_transformer.h"

#include <cstdio>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace strata::testing {
namespace {

std::vector<uint32_t> RandomTokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> tokens(n);
  for (uint32_t& t : tokens) t = static_cast<uint32_t>(rng() % 512);
  return tokens;
}

std::span<const float> Rows(const std::vector<float>& m, int64_t width, int64_t begin,
                            int64_t end) {
  return std::span(m).subspan(static_cast<size_t>(begin * width),
                              static_cast<size_t>((end - begin) * width));
}

class TinyTransformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<TinyTransformer> model = TinyTransformer::Create(TinyConfig{});
    ASSERT_TRUE(model.ok()) << model.status();
    model_.emplace(*std::move(model));
  }
  int64_t hidden() const { return model_->config().hidden(); }
  int64_t kv_width() const { return model_->config().kv_width(); }

  std::optional<TinyTransformer> model_;
};

TEST_F(TinyTransformerTest, ChunkedPrefillEqualsFullPrefill) {
  const std::vector<uint32_t> tokens = RandomTokens(96, 1);
  const TinyOutput full = *model_->Prefill(tokens);
  const TinyOutput first = *model_->Prefill(std::span(tokens).first(40));
  const TinyOutput rest = *model_->Extend(first.kv, std::span(tokens).subspan(40), 40);
  EXPECT_LT(RelativeDifference(rest.hidden, Rows(full.hidden, hidden(), 40, 96)), 1e-5);
  EXPECT_LT(RelativeDifference(first.hidden, Rows(full.hidden, hidden(), 0, 40)), 1e-6);
  for (int64_t l = 0; l < model_->config().layers; ++l) {
    EXPECT_LT(RelativeDifference(rest.kv.keys[l], Rows(full.kv.keys[l], kv_width(), 40, 96)), 1e-5);
  }
  EXPECT_EQ(rest.kv.positions.front(), 40);
}

TEST_F(TinyTransformerTest, NopeCacheWithFusedRopeEqualsStandardRope) {
  const std::vector<uint32_t> tokens = RandomTokens(80, 2);
  for (const int64_t first_position : {0, 1000}) {
    const TinyOutput fused = *model_->Prefill(tokens, first_position, false);
    const TinyOutput standard = *model_->Prefill(tokens, first_position, true);
    EXPECT_LT(RelativeDifference(fused.hidden, standard.hidden), 1e-5) << first_position;
  }
  // RoPE is relative: the whole prompt moved by 1000 positions attends as it did, up to the
  // rounding of the angle table.
  EXPECT_LT(
      RelativeDifference(model_->Prefill(tokens, 1000)->hidden, model_->Prefill(tokens, 0)->hidden),
      1e-3);
}

TEST_F(TinyTransformerTest, ReusedChunkDeviatesAndRecomputeRemovesIt) {
  // Prompt [A][B][Q]: B is a chunk cached from an earlier request where it stood alone at
  // position 0; here it follows A. Q's output is compared with the full prefill's.
  const std::vector<uint32_t> a = RandomTokens(48, 3), b = RandomTokens(64, 4),
                              q = RandomTokens(16, 5);
  std::vector<uint32_t> prompt = a;
  prompt.insert(prompt.end(), b.begin(), b.end());
  prompt.insert(prompt.end(), q.begin(), q.end());
  const TinyOutput full = *model_->Prefill(prompt);
  const std::span<const float> expected = Rows(full.hidden, hidden(), 112, 128);

  const TinyOutput prefix = *model_->Prefill(a);
  const TinyOutput cached_b = *model_->Prefill(b);  // alone, at position 0
  // Layer 0's keys are the embedding's projection: position-free, the same wherever B stands.
  const std::span<const float> full_b0 = Rows(full.kv.keys[0], kv_width(), 48, 112);
  EXPECT_EQ(cached_b.kv.keys[0], std::vector<float>(full_b0.begin(), full_b0.end()));
  // Deeper layers saw another context: they differ.
  EXPECT_GT(RelativeDifference(cached_b.kv.keys[2], Rows(full.kv.keys[2], kv_width(), 48, 112)),
            1e-3);

  std::vector<double> deviations;
  for (const int64_t recompute : {0, 16, 32, 64}) {
    // B's first `recompute` tokens computed after A (LegoLink-k / MEPIC's recomputed block), the
    // rest taken from the cache and moved to their positions here.
    TinyKv context = prefix.kv;
    if (recompute > 0) {
      const TinyOutput fresh =
          *model_->Extend(prefix.kv, std::span(b).first(static_cast<size_t>(recompute)), 48);
      for (int64_t l = 0; l < model_->config().layers; ++l) {
        EXPECT_LT(RelativeDifference(fresh.kv.keys[l],
                                     Rows(full.kv.keys[l], kv_width(), 48, 48 + recompute)),
                  1e-5)
            << "a recomputed block equals full prefill's";
      }
      context = context.Concat(fresh.kv);
    }
    context = context.Concat(cached_b.kv.Slice(recompute, 64).AtPositions(48 + recompute));
    const TinyOutput out = *model_->Extend(context, q, 112);
    deviations.push_back(RelativeDifference(out.hidden, expected));
    std::printf("recompute %lld of 64 chunk tokens: deviation of Q's output %.5f\n",
                static_cast<long long>(recompute), deviations.back());
  }
  EXPECT_GT(deviations[0], 1e-3) << "reuse without recompute is an approximation";
  EXPECT_LT(deviations[3], 1e-5) << "recomputing the whole chunk is full prefill";
  EXPECT_LT(deviations[1], deviations[0]) << "recompute reduces the deviation";
  EXPECT_LT(deviations[2], deviations[1]) << "more recompute reduces it more";
}

TEST_F(TinyTransformerTest, BadInputsAreInvalidArgument) {
  const std::vector<uint32_t> out_of_vocab = {1, 2, 512};
  EXPECT_EQ(model_->Prefill(out_of_vocab).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<uint32_t> tokens = RandomTokens(8, 6);
  EXPECT_EQ(model_->Prefill(tokens, 4090).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->Prefill({}).status().code(), absl::StatusCode::kInvalidArgument);
  TinyKv wrong;
  wrong.keys.resize(1);
  wrong.values.resize(1);
  EXPECT_EQ(model_->Extend(wrong, tokens, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TinyTransformer::Create(TinyConfig{.q_heads = 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::testing
