// The PIC oracle (tests/support/tiny_transformer.h) checked against itself and against
// ALGORITHMS.md section 3's invariants: chunked prefill equals full prefill; a NoPE cache with
// fused RoPE equals standard RoPE attention; recomputed blocks equal full prefill's; and reusing a
// chunk computed elsewhere deviates from full prefill by an amount that recomputing its tokens
// removes; a selective prefill (EPIC, MEPIC, CacheBlend) that recomputes every token is full
// prefill, one that recomputes a fixed set equals computing it in sequence, and CacheBlend's ends
// (ratio 1, ratio 0 at layer 0) are full prefill and naive reuse; and the paged selective
// prefill, reading shared blocks of a second cache in place, equals the selective prefill over a
// copy.
#include "tests/support/tiny_transformer.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "gtest/gtest.h"

namespace strata::testing {
namespace {

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

// Prompt [A][B][Q] with A and B computed alone (each at position 0) and cached, moved to their
// positions in the prompt; Q has no cache (zero rows).
struct CachedPrompt {
  std::vector<uint32_t> tokens;
  TinyKv cached;
  TinyOutput full;  // full prefill of the prompt
};
CachedPrompt MakeCachedPrompt(const TinyTransformer& model) {
  const std::vector<uint32_t> a = RandomTokens(32, 7), b = RandomTokens(48, 8),
                              q = RandomTokens(16, 9);
  CachedPrompt p;
  p.tokens = a;
  p.tokens.insert(p.tokens.end(), b.begin(), b.end());
  p.tokens.insert(p.tokens.end(), q.begin(), q.end());
  p.full = *model.Prefill(p.tokens);
  p.cached = model.Prefill(a)
                 ->kv.Concat(model.Prefill(b)->kv.AtPositions(32))
                 .Concat(TinyKv::Zeros(model.config(), 16).AtPositions(80));
  return p;
}

std::vector<int32_t> Range(int32_t begin, int32_t end) {
  std::vector<int32_t> out;
  for (int32_t t = begin; t < end; ++t) out.push_back(t);
  return out;
}

TEST_F(TinyTransformerTest, SelectivePrefillOfEveryTokenIsFullPrefill) {
  const CachedPrompt p = MakeCachedPrompt(*model_);
  for (const TinyRecompute& every :
       {TinyRecompute{.always = Range(0, 96)},
        TinyRecompute{.always = Range(80, 96), .check_layer = 1, .ratio = 1.0}}) {
    const absl::StatusOr<TinySelectiveOutput> out =
        model_->SelectivePrefill(p.tokens, p.cached, every);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(out->recomputed, Range(0, 96));
    EXPECT_LT(RelativeDifference(out->hidden, p.full.hidden), 1e-5);
    for (int64_t l = 0; l < model_->config().layers; ++l) {
      EXPECT_LT(RelativeDifference(out->kv.keys[l], p.full.kv.keys[l]), 1e-5) << l;
      EXPECT_LT(RelativeDifference(out->kv.values[l], p.full.kv.values[l]), 1e-5) << l;
    }
  }
}

TEST_F(TinyTransformerTest, FixedSelectionEqualsComputingItInSequence) {
  // LegoLink-k with k = 8 over B: Q and B's first 8 tokens recomputed, A and the rest of B cached.
  const CachedPrompt p = MakeCachedPrompt(*model_);
  std::vector<int32_t> always = Range(32, 40);
  for (const int32_t t : Range(80, 96)) always.push_back(t);
  const TinySelectiveOutput out = *model_->SelectivePrefill(p.tokens, p.cached, {.always = always});
  EXPECT_EQ(out.recomputed, always);

  // The same in sequence: B's first 8 after A's cache, B's cached rest, then Q.
  const TinyKv a = p.cached.Slice(0, 32);
  const TinyOutput head = *model_->Extend(a, std::span(p.tokens).subspan(32, 8), 32);
  const TinyKv context = a.Concat(head.kv).Concat(p.cached.Slice(40, 80));
  const TinyOutput q = *model_->Extend(context, std::span(p.tokens).subspan(80), 80);
  EXPECT_LT(RelativeDifference(Rows(out.hidden, hidden(), 8, 24), q.hidden), 1e-5);
  EXPECT_LT(RelativeDifference(Rows(out.hidden, hidden(), 0, 8), head.hidden), 1e-5);
  EXPECT_GT(
      RelativeDifference(Rows(out.hidden, hidden(), 8, 24), Rows(p.full.hidden, hidden(), 80, 96)),
      1e-4)
      << "still an approximation of full prefill";
}

// A paged cache as an engine holds it for MEPIC: 16-token blocks, the recomputed blocks (A's
// first, B's first, Q) in 3 engine blocks, A's and B's other blocks in a second cache of another
// layout (HND) read in place.
struct PagedPrompt {
  std::vector<float> engine_k, engine_v, shared_k, shared_v;  // [layer][block][...] each
  TinyPagedCache cache;
  std::vector<int32_t> recompute;
};
PagedPrompt MakePagedPrompt(const TinyConfig& c, const TinyKv& cached) {
  constexpr int64_t kBlock = 16;
  const int64_t block_elems = kBlock * c.kv_width();
  PagedPrompt p;
  p.cache.engine_spec =
      kernels::PagedKvSpec::Contiguous(KvDtype::kFloat32, 2, 3, kBlock, c.kv_heads, c.head_dim);
  p.cache.shared_spec =
      kernels::PagedKvSpec::ContiguousHnd(KvDtype::kFloat32, 2, 3, kBlock, c.kv_heads, c.head_dim);
  for (auto* plane : {&p.engine_k, &p.engine_v, &p.shared_k, &p.shared_v}) {
    plane->assign(static_cast<size_t>(c.layers * 3 * block_elems), 0.0f);
  }
  // Logical blocks [A1 A2 B1 B2 B3 Q]: engine blocks 0, 1, 2 and shared blocks 0, 1, 2.
  p.cache.block_table = {0, 3 + 0, 1, 3 + 1, 3 + 2, 2};
  for (int64_t l = 0; l < c.layers; ++l) {
    const size_t at = static_cast<size_t>(l * 3 * block_elems);
    p.cache.engine.push_back(kernels::PagedKvLayer::FromSeparatePlanes(
        &p.engine_k[at], 3 * block_elems, &p.engine_v[at], 3 * block_elems));
    p.cache.shared.push_back(kernels::PagedKvLayer::FromSeparatePlanes(
        &p.shared_k[at], 3 * block_elems, &p.shared_v[at], 3 * block_elems));
    const kernels::PagedKvSpec& spec = p.cache.shared_spec;
    for (const auto& [logical, shared] : {std::pair{1, 0}, {3, 1}, {4, 2}}) {
      for (int64_t t = 0; t < kBlock; ++t) {
        for (int64_t head = 0; head < c.kv_heads; ++head) {
          const int64_t from = (logical * kBlock + t) * c.kv_width() + head * c.head_dim;
          const int64_t to = spec.SlotOffset(shared, t) + head * spec.head_stride;
          for (int64_t d = 0; d < c.head_dim; ++d) {
            p.shared_k[at + to + d] = cached.keys[l][from + d];
            p.shared_v[at + to + d] = cached.values[l][from + d];
          }
        }
      }
    }
  }
  for (const auto& [begin, end] : {std::pair{0, 16}, {32, 48}, {80, 96}}) {
    for (int32_t t = begin; t < end; ++t) p.recompute.push_back(t);
  }
  return p;
}

TEST_F(TinyTransformerTest, PagedSelectivePrefillReadsTheSharedBlocksInPlace) {
  const CachedPrompt p = MakeCachedPrompt(*model_);
  PagedPrompt paged = MakePagedPrompt(model_->config(), p.cached);
  const absl::StatusOr<TinySelectiveOutput> out =
      model_->PagedSelectivePrefill(p.tokens, paged.cache, paged.recompute);
  ASSERT_TRUE(out.ok()) << out.status();
  const TinySelectiveOutput copied =
      *model_->SelectivePrefill(p.tokens, p.cached, {.always = paged.recompute});
  EXPECT_EQ(out->recomputed, copied.recomputed);
  EXPECT_LT(RelativeDifference(out->hidden, copied.hidden), 1e-5)
      << "the same computation as over a copied cache";
  // The engine blocks hold the recomputed tokens' last layer KV.
  const int64_t last = model_->config().layers - 1;
  const int64_t block_elems = 16 * kv_width();
  const std::span<const float> engine_keys =
      std::span(paged.engine_k).subspan(static_cast<size_t>(last * 3 * block_elems), block_elems);
  EXPECT_LT(RelativeDifference(engine_keys, Rows(copied.kv.keys[last], kv_width(), 0, 16)), 1e-5);

  // What the engine may not do: write into a shared block, or run past the table.
  std::vector<int32_t> into_shared = paged.recompute;
  into_shared.insert(into_shared.begin() + 16, 16);  // A's second block's first token: shared
  EXPECT_EQ(model_->PagedSelectivePrefill(p.tokens, paged.cache, into_shared).status().code(),
            absl::StatusCode::kInvalidArgument);
  TinyPagedCache short_table = paged.cache;
  short_table.block_table.pop_back();
  EXPECT_EQ(model_->PagedSelectivePrefill(p.tokens, short_table, paged.recompute).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->PagedSelectivePrefill(p.tokens, paged.cache, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TinyTransformerTest, CacheBlendAtLayerZeroWithRatioZeroIsNaiveReuse) {
  const CachedPrompt p = MakeCachedPrompt(*model_);
  const TinySelectiveOutput blend = *model_->SelectivePrefill(
      p.tokens, p.cached, {.always = Range(80, 96), .check_layer = 0, .ratio = 0.0});
  EXPECT_EQ(blend.recomputed, Range(80, 96));
  const TinyOutput naive =
      *model_->Extend(p.cached.Slice(0, 80), std::span(p.tokens).subspan(80), 80);
  EXPECT_LT(RelativeDifference(blend.hidden, naive.hidden), 1e-5);
}

TEST_F(TinyTransformerTest, CacheBlendSelectsTheTokensThatDeviateAndConverges) {
  const CachedPrompt p = MakeCachedPrompt(*model_);
  const std::span<const float> expected = Rows(p.full.hidden, hidden(), 80, 96);
  std::vector<double> deviations;
  for (const double ratio : {0.0, 0.25, 0.5, 1.0}) {
    const TinySelectiveOutput out = *model_->SelectivePrefill(
        p.tokens, p.cached, {.always = Range(80, 96), .check_layer = 1, .ratio = ratio});
    // floor(80 * ratio) of A's and B's tokens, then Q's 16.
    ASSERT_EQ(out.recomputed.size(), static_cast<size_t>(80 * ratio) + 16);
    EXPECT_TRUE(std::is_sorted(out.recomputed.begin(), out.recomputed.end()));
    const auto rows = static_cast<int64_t>(out.recomputed.size());
    deviations.push_back(RelativeDifference(Rows(out.hidden, hidden(), rows - 16, rows), expected));
    std::printf("CacheBlend ratio %.2f: deviation of Q's output %.5f\n", ratio, deviations.back());
  }
  EXPECT_LT(deviations[3], 1e-5) << "ratio 1 is full prefill";
  EXPECT_LT(deviations[1], deviations[0]) << "recompute reduces the deviation";
  EXPECT_LT(deviations[2], deviations[0]);
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

  const CachedPrompt p = MakeCachedPrompt(*model_);
  for (const TinyRecompute& bad :
       {TinyRecompute{.always = {3, 2}}, TinyRecompute{.always = {95, 96}},
        TinyRecompute{.always = {-1}}, TinyRecompute{.check_layer = 3, .ratio = 0.5},
        TinyRecompute{.check_layer = 1, .ratio = 1.5}}) {
    EXPECT_EQ(model_->SelectivePrefill(p.tokens, p.cached, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(model_->SelectivePrefill(std::span(p.tokens).first(95), p.cached, {}).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a cache of another size";
  TinyKv unordered = p.cached;
  std::swap(unordered.positions[3], unordered.positions[4]);
  EXPECT_EQ(model_->SelectivePrefill(p.tokens, unordered, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::testing
