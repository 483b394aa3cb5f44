// PicConnector, the public surface of position-independent reuse, against the daemon's real
// session server with a device pool (TestDaemon, HostRuntime pool of 8 pages): a chunk written by
// one engine is shared by another at another offset, its markers given or found by a separator;
// bad input is refused with nothing left open; a daemon away leaves every chunk private; Verify
// tells an engine when the session that held its pages dropped; concurrent requests; a
// rope_applied layout's chunk, stored rotated at its canonical positions, re-rotated on load.
#include "strata/pic_connector.h"

#include <cmath>
#include <numeric>
#include <random>
#include <thread>

#include "connector/src/device_pool_view.h"
#include "connector/src/testing/pool_pages.h"
#include "connector/src/testing/test_daemon.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/rope.h"
#include "storage/device/host_runtime.h"
#include "tests/support/test_layout.h"

namespace strata::connector {
namespace {

using std::chrono::milliseconds;
using testing::FillPoolPages;
using testing::PoolPagesHold;
using testing::TestDaemon;

constexpr uint32_t kBlock = 16;
constexpr uint32_t kPad = 7;
constexpr uint32_t kSeparator = 999999;

ConnectorOptions Options(const std::string& socket, std::string engine_id) {
  ConnectorOptions options;
  options.socket_path = socket;
  options.engine_id = std::move(engine_id);
  options.layout = test_support::SmallLayout({.model_id = "pic-connector-test"});
  options.block_size = kBlock;
  options.reconnect_min_backoff = milliseconds(1);
  options.reconnect_max_backoff = milliseconds(1);
  return options;
}

std::unique_ptr<PicConnector> Connect(const std::string& socket, std::string engine_id) {
  auto connector = PicConnector::Create(Options(socket, std::move(engine_id)), kPad,
                                        std::make_unique<storage::HostRuntime>());
  EXPECT_TRUE(connector.ok()) << connector.status();
  return *std::move(connector);
}

std::vector<uint32_t> Passage(uint32_t first, uint32_t n) {
  std::vector<uint32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// `pieces` joined by the separator token.
std::vector<uint32_t> Joined(const std::vector<std::vector<uint32_t>>& pieces) {
  std::vector<uint32_t> tokens;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i > 0) tokens.push_back(kSeparator);
    tokens.insert(tokens.end(), pieces[i].begin(), pieces[i].end());
  }
  return tokens;
}

std::vector<PicChunkState> States(const PicPlan& plan) {
  std::vector<PicChunkState> out;
  for (const PicChunk& chunk : plan.chunks) out.push_back(chunk.state);
  return out;
}

storage::DevicePoolGeometry Geometry(const PicPoolView& pool) {
  return {
      .num_layers = pool.num_layers, .num_pages = pool.num_pages, .page_bytes = pool.page_bytes};
}

std::byte* Base(const PicPoolView& pool) { return reinterpret_cast<std::byte*>(pool.base); }

class PicConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.Start().ok()); }
  storage::DevicePoolStats PoolStats() {
    return (*daemon_.device_pools()->ForLayout(Options("", "").layout))->Stats();
  }

  // 2 layers x 2 KiB per 16-token page: 8 pages.
  TestDaemon daemon_{{.device_pool_bytes = 8 * 4096}};
};

TEST_F(PicConnectorTest, AChunkWrittenByOneEngineIsSharedByAnotherAtAnotherOffset) {
  const std::vector<uint32_t> a = Passage(1000, 40), b = Passage(2000, 16),
                              question = Passage(3000, 5);
  auto writer = Connect(daemon_.socket_path(), "writer");
  const std::vector<uint32_t> first = Joined({a, b, question});
  auto markers = PicConnector::MarkersFromSeparator(first, std::vector<uint32_t>{kSeparator});
  ASSERT_TRUE(markers.ok());
  ASSERT_EQ(*markers, (std::vector<PicTokenSpan>{{0, 40}, {41, 57}}));
  auto written = writer->Begin("r", first, *markers);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(States(*written), (std::vector{PicChunkState::kWrite, PicChunkState::kWrite}));
  ASSERT_TRUE(written->pool.has_value());
  EXPECT_EQ(written->pool->block_tokens, kBlock);
  EXPECT_EQ(written->pool->layer_stride_bytes,
            uint64_t{written->pool->num_pages} * written->pool->page_bytes);
  EXPECT_EQ(written->chunks[0].padded, (PicTokenSpan{0, 48})) << "8 leading pads: 3 blocks";
  EXPECT_EQ(written->chunks[0].source, (PicTokenSpan{0, 40}));
  EXPECT_EQ(written->chunks[0].pool_pages.size(), 3u);
  EXPECT_EQ(written->padded_tokens[0], kPad);
  EXPECT_EQ(written->recomputed_tokens, written->padded_tokens.size()) << "nothing was cached";
  FillPoolPages(Base(*written->pool), Geometry(*written->pool), written->chunks[0].pool_pages,
                0xa1);
  FillPoolPages(Base(*written->pool), Geometry(*written->pool), written->chunks[1].pool_pages,
                0xb2);
  auto published = writer->Publish("r");
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(States(*published), (std::vector{PicChunkState::kShared, PicChunkState::kShared}));

  // Another engine, the passages swapped behind a prompt of its own, markers given.
  auto reader = Connect(daemon_.socket_path(), "reader");
  std::vector<uint32_t> second = Passage(4000, 9);
  second.insert(second.end(), b.begin(), b.end());
  second.insert(second.end(), a.begin(), a.end());
  second.insert(second.end(), question.begin(), question.end());
  const std::vector<PicTokenSpan> spans = {{9, 25}, {25, 65}};
  auto shared = reader->Begin("r", second, spans, {.recompute = PicRecomputePolicy::kMepic});
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_EQ(States(*shared), (std::vector{PicChunkState::kShared, PicChunkState::kShared}));
  EXPECT_EQ(shared->chunks[0].pool_pages, published->chunks[1].pool_pages) << "b's pages";
  EXPECT_EQ(shared->chunks[1].pool_pages, published->chunks[0].pool_pages) << "a's pages";
  EXPECT_TRUE(PoolPagesHold(Base(*shared->pool), Geometry(*shared->pool),
                            shared->chunks[1].pool_pages, 0xa1));
  // [9 prompt + 7 pads][b: 16][a: 8 pads + 40][question: 5]; MEPIC recomputes the prompt, the
  // first block of each chunk and the question.
  EXPECT_EQ(shared->chunks[0].padded, (PicTokenSpan{16, 32}));
  EXPECT_EQ(shared->chunks[1].padded, (PicTokenSpan{32, 80}));
  EXPECT_EQ(shared->recompute_from_layer_zero, (std::vector<PicTokenSpan>{{0, 48}, {80, 85}}));
  EXPECT_EQ(shared->recomputed_tokens, 48u + 5u);
  EXPECT_TRUE(reader->Verify("r").ok());
  EXPECT_EQ(PoolStats().referenced_pages, 4u) << "two readers, one set of pages";

  EXPECT_TRUE(writer->End("r").ok());
  EXPECT_TRUE(reader->End("r").ok());
  EXPECT_EQ(reader->End("r").code(), absl::StatusCode::kNotFound) << "ended already";
  EXPECT_EQ(writer->open_requests() + reader->open_requests(), 0u);
  EXPECT_EQ(PoolStats().referenced_pages, 0u);
  EXPECT_EQ(PoolStats().committed_pages, 4u) << "kept for the next request";
}

// Two engines at once: while one writes a chunk, the other's request finds it pending; a Refresh
// after the writer published shares the writer's pages.
// Keys of a rope_applied layout, stored as the writer's attention left them (rotated at the
// chunk's canonical positions 0..n), are re-rotated by the chunk's offset as a reader copies them:
// they equal RoPE applied at the reader's positions. The pages themselves stay canonical.
TEST_F(PicConnectorTest, ARopeAppliedChunkIsStoredAtItsCanonicalPositionsAndReRotatedOnLoad) {
  const KvLayout layout = Options("", "").layout;
  ASSERT_EQ(layout.positional, PositionalFormat::kRopeApplied);
  const int64_t heads = layout.num_kv_heads, dim = layout.head_dim, n = 2 * kBlock;
  auto table = kernels::RopeTable::Create({.rotary_dim = dim, .max_position = 256});
  ASSERT_TRUE(table.ok());
  // The chunk's keys before RoPE, per layer, fp32 [token][head][dim].
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> nope(layout.num_layers, std::vector<float>(n * heads * dim));
  for (auto& layer : nope) {
    for (float& v : layer) v = normal(rng);
  }
  // `positions` of the chunk's keys rotated, rounded to the layout's fp16.
  auto rotated = [&](uint32_t layer, int64_t first) {
    std::vector<uint16_t> out(nope[layer].size());
    std::vector<float> keys = nope[layer];
    std::vector<int64_t> positions(n);
    std::iota(positions.begin(), positions.end(), first);
    const auto view = kernels::HeadsView::Dense(keys.data(), KvDtype::kFloat32, n, heads, dim);
    EXPECT_TRUE(kernels::ApplyRope(*table, view, view, positions).ok());
    for (size_t i = 0; i < keys.size(); ++i) out[i] = kernels::FloatToFp16Bits(keys[i]);
    return out;
  };
  // Token t's key row (heads x dim fp16) in the chunk's pages.
  auto key_row = [&](const PicPlan& plan, const PicChunk& chunk, uint32_t layer, int64_t t) {
    auto cache =
        internal::DevicePoolAsPagedKvCache(layout, kBlock, Geometry(*plan.pool), Base(*plan.pool));
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache->planes[layer][0] +
           chunk.pool_pages[t / kBlock] * cache->geometry.block_stride_bytes +
           (t % kBlock) * cache->geometry.slot_stride_bytes;
  };
  const uint64_t row_bytes = heads * dim * 2;

  const std::vector<uint32_t> passage = Passage(1000, n);
  auto writer = Connect(daemon_.socket_path(), "writer");
  auto written = writer->Begin("w", passage, std::vector<PicTokenSpan>{{0, uint32_t(n)}});
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_EQ(States(*written), (std::vector{PicChunkState::kWrite}));
  ASSERT_TRUE(written->pool->keys_rotated) << "a rope_applied layout";
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    const std::vector<uint16_t> canonical = rotated(layer, 0);
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(key_row(*written, written->chunks[0], layer, t),
                  canonical.data() + t * heads * dim, row_bytes);
    }
  }
  ASSERT_TRUE(writer->Publish("w").ok());

  // Another engine holds the passage behind 9 tokens of its own: at padded position 16.
  auto reader = Connect(daemon_.socket_path(), "reader");
  std::vector<uint32_t> prompt = Passage(5000, 9);
  prompt.insert(prompt.end(), passage.begin(), passage.end());
  auto shared = reader->Begin("r", prompt, std::vector<PicTokenSpan>{{9, uint32_t(9 + n)}});
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_EQ(States(*shared), (std::vector{PicChunkState::kShared}));
  ASSERT_TRUE(shared->pool->keys_rotated);
  const PicChunk& chunk = shared->chunks[0];
  ASSERT_EQ(chunk.padded, (PicTokenSpan{16, uint32_t(16 + n)}));
  // Read through own blocks: MEPIC computes block 1 whole; block 2 is a re-rotated copy.
  ASSERT_EQ(shared->block_table.blocks.size(), 3u);
  EXPECT_FALSE(shared->block_table.blocks[2].pool);
  EXPECT_EQ(shared->block_table.blocks[2].fill_from_page, chunk.pool_pages[1]);
  EXPECT_FALSE(shared->block_table.blocks[1].fill_from_page.has_value());
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    // The copy into the reader's own blocks, re-rotated from j to padded.begin + j.
    std::vector<uint16_t> copy(n * heads * dim);
    for (int64_t t = 0; t < n; ++t) {
      std::memcpy(copy.data() + t * heads * dim, key_row(*shared, chunk, layer, t), row_bytes);
    }
    std::vector<int64_t> from(n), to(n);
    std::iota(from.begin(), from.end(), 0);
    std::iota(to.begin(), to.end(), int64_t{chunk.padded.begin});
    ASSERT_TRUE(kernels::ReRotateRope(
                    *table,
                    kernels::HeadsView::Dense(copy.data(), KvDtype::kFloat16, n, heads, dim), from,
                    to)
                    .ok());
    const std::vector<uint16_t> wanted = rotated(layer, chunk.padded.begin);
    const std::vector<uint16_t> canonical = rotated(layer, 0);
    int mismatches = 0;
    for (size_t i = 0; i < copy.size(); ++i) {
      const float got = kernels::Fp16BitsToFloat(copy[i]);
      const float want = kernels::Fp16BitsToFloat(wanted[i]);
      // Two fp16 roundings (stored, re-rotated) against one: a few units in the last place.
      if (std::fabs(got - want) > 4e-3f * std::fabs(want) + 2e-3f) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0) << "layer " << layer;
    EXPECT_NE(canonical, wanted) << "the offset moves the keys";
    for (int64_t t = 0; t < n; ++t) {
      EXPECT_EQ(0, std::memcmp(key_row(*shared, chunk, layer, t),
                               canonical.data() + t * heads * dim, row_bytes))
          << "the pages stay canonical: layer " << layer << " token " << t;
    }
  }
  EXPECT_TRUE(writer->End("w").ok());
  EXPECT_TRUE(reader->End("r").ok());
}

// The block table (PicPlan::block_table) of a nope layout: the shared chunk's pages read in place
// but where the policy recomputes; CacheBlend fills every shared block from its page.
TEST(PicConnectorNopeTest, TheBlockTableReadsSharedPagesInPlaceWhereNothingIsRecomputed) {
  ConnectorOptions options = Options("", "nope");
  options.layout.positional = PositionalFormat::kNope;
  TestDaemon daemon({.device_pool_bytes = 8 * 4096});
  ASSERT_TRUE(daemon.Start().ok());
  options.socket_path = daemon.socket_path();
  auto created = PicConnector::Create(options, kPad, std::make_unique<storage::HostRuntime>());
  ASSERT_TRUE(created.ok()) << created.status();
  PicConnector& connector = **created;
  const std::vector<uint32_t> passage = Passage(1000, 48);  // 3 blocks, no pads
  auto written = connector.Begin("w", passage, std::vector<PicTokenSpan>{{0, 48}});
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_FALSE(written->pool->keys_rotated);
  EXPECT_EQ(written->block_table.own_blocks, 3u) << "a chunk being written is the engine's own";
  ASSERT_TRUE(connector.Publish("w").ok());
  const std::vector<uint32_t> pages = written->chunks[0].pool_pages;

  // [9 prompt tokens + 7 pads][the passage: 3 blocks][3 question tokens]: blocks 0..4.
  std::vector<uint32_t> prompt = Passage(5000, 9);
  prompt.insert(prompt.end(), passage.begin(), passage.end());
  prompt.insert(prompt.end(), {7001, 7002, 7003});
  const std::vector<PicTokenSpan> spans = {{9, 57}};
  using B = PicBlock;
  const struct {
    PicRecomputePolicy recompute;
    uint32_t legolink_tokens;
    std::vector<PicBlock> blocks;
  } cases[] = {
      // MEPIC: block 1 of the chunk computed whole, blocks 2..3 in place.
      {PicRecomputePolicy::kMepic,
       0,
       {B{false, 0}, B{false, 1}, B{true, pages[1]}, B{true, pages[2]}, B{false, 2}}},
      // LegoLink-4: 4 tokens of block 1; its other 12 come from its page.
      {PicRecomputePolicy::kLegoLink,
       4,
       {B{false, 0}, B{false, 1, pages[0]}, B{true, pages[1]}, B{true, pages[2]}, B{false, 2}}},
      // LegoLink-0: nothing of the chunk.
      {PicRecomputePolicy::kLegoLinkZero,
       0,
       {B{false, 0}, B{true, 0}, B{true, 0}, B{true, 0}, B{false, 1}}},
      // CacheBlend: every shared block is the request's own, filled from its page.
      {PicRecomputePolicy::kCacheBlend,
       0,
       {B{false, 0}, B{false, 1, pages[0]}, B{false, 2, pages[1]}, B{false, 3, pages[2]},
        B{false, 4}}},
  };
  for (const auto& c : cases) {
    PicRequestOptions request{.recompute = c.recompute};
    if (c.legolink_tokens > 0) request.legolink_tokens = c.legolink_tokens;
    auto plan = connector.Begin("r", prompt, spans, request);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const std::string policy(PicRecomputePolicyName(c.recompute));
    EXPECT_EQ(plan->compile_dummies, c.recompute == PicRecomputePolicy::kLegoLinkZero ? 3u : 0u)
        << policy;
    if (c.recompute == PicRecomputePolicy::kLegoLinkZero) {
      // Compiled after its dummies: another key, a chunk of its own to write.
      EXPECT_EQ(States(*plan), (std::vector{PicChunkState::kWrite}));
      EXPECT_EQ(plan->block_table.own_blocks, 5u) << policy;
      EXPECT_TRUE(connector.End("r").ok());
      continue;
    }
    ASSERT_EQ(States(*plan), (std::vector{PicChunkState::kShared})) << policy;
    ASSERT_EQ(plan->block_table.blocks.size(), c.blocks.size()) << policy;
    uint32_t own = 0;
    for (size_t j = 0; j < c.blocks.size(); ++j) {
      const PicBlock& got = plan->block_table.blocks[j];
      EXPECT_EQ(got.pool, c.blocks[j].pool) << policy << " block " << j;
      EXPECT_EQ(got.index, c.blocks[j].index) << policy << " block " << j;
      EXPECT_EQ(got.fill_from_page, c.blocks[j].fill_from_page) << policy << " block " << j;
      EXPECT_EQ(got.position, j * 16) << policy << " block " << j << ": a whole chunk's blocks";
      own += got.pool ? 0 : 1;
    }
    EXPECT_EQ(plan->block_table.own_blocks, own) << policy;
    EXPECT_TRUE(connector.End("r").ok());
  }

  // The table the attention kernel takes: own blocks by the engine's ids, pages after them.
  auto plan = connector.Begin("r", prompt, spans);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const PicBlockTable& table = plan->block_table;
  auto attention = table.AttentionTable(std::vector<int32_t>{40, 41, 42}, 100);
  ASSERT_TRUE(attention.ok()) << attention.status();
  EXPECT_EQ(*attention, (std::vector<int32_t>{40, 41, 100 + static_cast<int32_t>(pages[1]),
                                              100 + static_cast<int32_t>(pages[2]), 42}));
  EXPECT_EQ(table.AttentionTable(std::vector<int32_t>{40, 41}, 100).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "too few own blocks";
  EXPECT_EQ(table.AttentionTable(std::vector<int32_t>{40, 41, 100}, 100).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "an own block past the engine's";
  EXPECT_EQ(table.AttentionTable(std::vector<int32_t>{0, 1, 2}, INT32_MAX).status().code(),
            absl::StatusCode::kInvalidArgument)
      << "a page id past int32";
  EXPECT_TRUE(connector.End("r").ok());
  EXPECT_TRUE(connector.End("w").ok());
}

TEST_F(PicConnectorTest, APendingChunkIsSharedOnceItsWriterPublishes) {
  auto writer = Connect(daemon_.socket_path(), "writer");
  auto waiter = Connect(daemon_.socket_path(), "waiter");
  const std::vector<uint32_t> prompt = Passage(1000, 40);
  const std::vector<PicTokenSpan> spans = {{0, 32}};
  auto written = writer->Begin("w", prompt, spans);
  ASSERT_TRUE(written.ok());
  ASSERT_EQ(States(*written), std::vector{PicChunkState::kWrite});
  auto waiting = waiter->Begin("p", prompt, spans);
  ASSERT_TRUE(waiting.ok());
  ASSERT_EQ(States(*waiting), std::vector{PicChunkState::kPending});
  EXPECT_FALSE(waiting->chunks[0].why_private.empty());
  EXPECT_EQ(waiting->recomputed_tokens, waiting->padded_tokens.size())
      << "computed whole unless the engine waits";
  auto refreshed = waiter->Refresh("p");
  ASSERT_TRUE(refreshed.ok());
  EXPECT_EQ(States(*refreshed), std::vector{PicChunkState::kPending}) << "not published yet";

  ASSERT_TRUE(writer->Publish("w").ok());
  refreshed = waiter->Refresh("p");
  ASSERT_TRUE(refreshed.ok()) << refreshed.status();
  ASSERT_EQ(States(*refreshed), std::vector{PicChunkState::kShared});
  EXPECT_EQ(refreshed->chunks[0].pool_pages, written->chunks[0].pool_pages);
  EXPECT_LT(refreshed->recomputed_tokens, refreshed->padded_tokens.size());
  EXPECT_EQ(waiter->Refresh("nobody").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(writer->End("w").ok());
  EXPECT_TRUE(waiter->End("p").ok());
  EXPECT_EQ(PoolStats().referenced_pages, 0u);
}

TEST_F(PicConnectorTest, BadInputIsRefusedAndLeavesNothingOpen) {
  auto engine = Connect(daemon_.socket_path(), "engine");
  const std::vector<uint32_t> prompt = Passage(1000, 64);
  const std::vector<std::vector<PicTokenSpan>> bad_spans = {
      {{10, 30}, {20, 40}},  // overlapping
      {{30, 40}, {10, 20}},  // out of order
      {{10, 10}},            // empty
      {{50, 70}},            // past the prompt
  };
  for (const std::vector<PicTokenSpan>& spans : bad_spans) {
    EXPECT_EQ(engine->Begin("bad", prompt, spans).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  const std::vector<PicRequestOptions> bad_options = {
      {.recompute = PicRecomputePolicy::kLegoLink, .legolink_tokens = 0},
      {.recompute = PicRecomputePolicy::kCacheBlend, .check_layer = 2},  // a 2-layer model
      {.recompute = PicRecomputePolicy::kCacheBlend, .blend_ratio = 1.5},
  };
  for (const PicRequestOptions& options : bad_options) {
    EXPECT_EQ(engine->Begin("bad", prompt, {{{0, 32}}}, options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(engine->open_requests(), 0u);
  EXPECT_EQ(PoolStats().reserved_pages, 0u) << "nothing was sent";
  EXPECT_EQ(PicConnector::MarkersFromSeparator(prompt, {}).status().code(),
            absl::StatusCode::kInvalidArgument);

  ASSERT_TRUE(engine->Begin("open", prompt, {{{0, 32}}}).ok());
  EXPECT_EQ(engine->Begin("open", prompt, {{{0, 32}}}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(engine->open_requests(), 1u);
  EXPECT_EQ(engine->Publish("nobody").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->Verify("nobody").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->End("nobody").code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(engine->End("open").ok());

  for (const PicRecomputePolicy policy :
       {PicRecomputePolicy::kMepic, PicRecomputePolicy::kLegoLink,
        PicRecomputePolicy::kLegoLinkZero, PicRecomputePolicy::kCacheBlend}) {
    EXPECT_EQ(*ParsePicRecomputePolicy(PicRecomputePolicyName(policy)), policy);
  }
  EXPECT_EQ(ParsePicRecomputePolicy("blend").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PicConnectorTest, WithoutADaemonEveryChunkIsPrivate) {
  auto engine = Connect((daemon_.dir() / "nobody.sock").string(), "engine");
  const std::vector<uint32_t> prompt = Passage(1000, 70);
  auto plan = engine->Begin("r", prompt, {{{10, 42}}});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(States(*plan), std::vector{PicChunkState::kPrivate});
  EXPECT_FALSE(plan->chunks[0].why_private.empty());
  EXPECT_FALSE(plan->pool.has_value());
  EXPECT_EQ(plan->recompute_from_layer_zero,
            (std::vector<PicTokenSpan>{{0, static_cast<uint32_t>(plan->padded_tokens.size())}}));
  EXPECT_TRUE(engine->Verify("r").ok()) << "nothing was read from the pool";
  EXPECT_TRUE(engine->End("r").ok());
}

TEST_F(PicConnectorTest, VerifySaysWhenTheSessionThatHeldThePagesDropped) {
  auto engine = Connect(daemon_.socket_path(), "engine");
  const std::vector<uint32_t> prompt = Passage(1000, 40);
  ASSERT_TRUE(engine->Begin("w", prompt, {{{0, 32}}}).ok());
  ASSERT_TRUE(engine->Publish("w").ok());
  auto plan = engine->Begin("r", prompt, {{{0, 32}}});
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(States(*plan), std::vector{PicChunkState::kShared});
  EXPECT_TRUE(engine->Verify("r").ok());

  daemon_.Stop();  // every session ends: the daemon released the pages
  const absl::Status verified = engine->Verify("r");
  EXPECT_EQ(verified.code(), absl::StatusCode::kAborted) << verified;
  EXPECT_TRUE(engine->End("r").ok()) << "a dropped session is not an error";
  EXPECT_TRUE(engine->End("w").ok());
  EXPECT_EQ(engine->open_requests(), 0u);
}

// Requests of several threads on one connector, each its own id: placed, published and ended
// with nothing left referenced or reserved.
TEST_F(PicConnectorTest, ConcurrentRequests) {
  auto engine = Connect(daemon_.socket_path(), "engine");
  constexpr int kThreads = 4, kRequests = 25;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRequests; ++i) {
        const std::string id = std::to_string(t) + "/" + std::to_string(i);
        const std::vector<uint32_t> prompt = Passage(1000 + 100 * (i % 3), 40);
        auto plan = engine->Begin(id, prompt, {{{4, 36}}});
        if (!plan.ok() || !engine->Publish(id).ok() || !engine->End(id).ok()) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(engine->open_requests(), 0u);
  const storage::DevicePoolStats stats = PoolStats();
  EXPECT_EQ(stats.referenced_pages, 0u);
  EXPECT_EQ(stats.reserved_pages, 0u);
}

}  // namespace
}  // namespace strata::connector
