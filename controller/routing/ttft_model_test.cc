#include "controller/routing/ttft_model.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::controller {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;

// Round numbers: 1 ms a token, 1000 bytes of KV a token; host 1 MB/s (1 ms a token, as fast as
// recomputing), disk 0.5 MB/s (slower than recomputing), device free.
TtftModelOptions RoundOptions() {
  TtftModelOptions options;
  options.prefill_s_per_token = 1e-3;
  options.kv_bytes_per_token = 1000;
  options.tier_bytes_per_s = {0, 2e6, 0.5e6, 1e6};
  return options;
}

TEST(TtftModelTest, PartsFollowTheFormula) {
  const RouteCandidate candidate{.cached_prefix = {{.tokens = 100, .tier = Tier::kDevice},
                                                   {.tokens = 100, .tier = Tier::kHost},
                                                   {.tokens = 100, .tier = Tier::kRemote}},
                                 .queued_prefill_tokens = 50};
  const TtftEstimate e = ModelTtft(RoundOptions(), 1000, candidate);
  EXPECT_EQ(e.cached_tokens, 300u);
  EXPECT_THAT(e.queue_s, DoubleNear(0.050, 1e-12));
  // device: free; host: 100 tokens x 1000 B / 2 MB/s = 50 ms; remote: 100 ms (= recomputing).
  EXPECT_THAT(e.load_s, DoubleNear(0.150, 1e-12));
  EXPECT_THAT(e.prefill_s, DoubleNear(0.700, 1e-12));
  EXPECT_THAT(e.saved_s, DoubleNear(0.300, 1e-12));
  EXPECT_THAT(e.ttft_s(), DoubleNear(0.900, 1e-12));
  EXPECT_THAT(e.score(), DoubleNear(1000 * 1e-3 - e.ttft_s(), 1e-12));
  EXPECT_EQ(e.loaded_tokens, 200u) << "the remote chunk is recomputed (a tie)";
}

TEST(TtftModelTest, AChunkSlowerToLoadThanToRecomputeCostsItsRecompute) {
  const RouteCandidate on_disk{.cached_prefix = {{.tokens = 200, .tier = Tier::kDisk}}};
  const TtftEstimate e = ModelTtft(RoundOptions(), 400, on_disk);
  EXPECT_THAT(e.load_s, DoubleNear(0.200, 1e-12)) << "400 ms to load, 200 ms to recompute";
  EXPECT_THAT(e.ttft_s(), DoubleNear(0.400, 1e-12)) << "no worse than no cache";
  EXPECT_THAT(e.score(), DoubleNear(0, 1e-12));
  EXPECT_EQ(e.loaded_tokens, 0u);
}

TEST(TtftModelTest, CachedTokensBeyondThePromptAreIgnored) {
  const RouteCandidate candidate{.cached_prefix = {{.tokens = 256, .tier = Tier::kHost},
                                                   {.tokens = 256, .tier = Tier::kHost}}};
  const TtftEstimate e = ModelTtft(RoundOptions(), 300, candidate);
  EXPECT_EQ(e.cached_tokens, 300u);
  EXPECT_THAT(e.prefill_s, DoubleNear(0, 1e-12));
  EXPECT_EQ(ModelTtft(RoundOptions(), 0, candidate).cached_tokens, 0u);
}

// Tier-aware ranking: a longer prefix on a slow tier loses to a shorter one in memory, and a
// long queue outweighs a hit.
TEST(TtftModelTest, RanksByTierAndLoadNotByOverlapAlone) {
  const std::vector<RouteCandidate> candidates = {
      {.cached_prefix = {{.tokens = 600, .tier = Tier::kDisk}}},  // 0.6 + 0.4 = 1.0 s
      {.cached_prefix = {{.tokens = 400, .tier = Tier::kHost}}},  // 0.2 + 0.6 = 0.8 s
      {.cached_prefix = {{.tokens = 800, .tier = Tier::kHost}},   // 0.4 + 0.2 + 0.9 s
       .queued_prefill_tokens = 900},
      {}};  // 1.0 s
  EXPECT_THAT(RankByModelledTtft(RoundOptions(), 1000, candidates), ElementsAre(1, 0, 3, 2));
  EXPECT_TRUE(RankByModelledTtft(RoundOptions(), 1000, {}).empty());
}

}  // namespace
}  // namespace strata::controller
