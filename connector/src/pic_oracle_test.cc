// The correctness oracle of position-independent reuse (ALGORITHMS.md section 3) run through the
// daemon's device pool and the connector: a tiny CPU transformer (tests/support/tiny_transformer.h,
// fp32 KV, NoPE keys) is the engine. Its chunks are computed once, alone (LegoLink-0: after its
// dummy tokens), written into the pool pages PicRequests reserved, published, and read in place
// by another engine's request that holds the same passages at other offsets. The reader then
// recomputes what its request's policy says (pic_policy.h: MEPIC's block 1 of each chunk,
// LegoLink-k's first k tokens, LegoLink-0's nothing, CacheBlend's tokens that deviate most at its
// check layer) and attends over the rest from the pool at their positions here.
//
// Checked: the pool's pages hold, byte for byte, what the writer computed, for every reader; the
// block recomputed after an exact prefix equals full prefill's; recomputing every chunk, and
// CacheBlend at ratio 1, equal full prefill; and the question's deviation from full prefill falls
// as each policy's recompute budget grows; and MEPIC run as an engine runs it, its block table
// naming its own blocks and the pool's pages read in place (kernels::PagedAttention over both
// caches), equals MEPIC over a copy of the pages with engine blocks only for what it recomputes.
// Every policy's deviation is printed. A chunk Compress thinned in the host tier is read as its
// kept blocks at their positions, equal to attention over the tokens that are left.
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "connector/src/device_pool_view.h"
#include "connector/src/pic_plan.h"
#include "connector/src/pic_requests.h"
#include "connector/src/testing/test_daemon.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "storage/codec/codec_registry.h"
#include "storage/device/host_runtime.h"
#include "tests/support/test_layout.h"
#include "tests/support/tiny_transformer.h"

namespace strata::connector::internal {
namespace {

using std::chrono::milliseconds;
using strata::testing::RandomTokens;
using strata::testing::RelativeDifference;
using strata::testing::Rows;
using strata::testing::TinyConfig;
using strata::testing::TinyKv;
using strata::testing::TinyOutput;
using strata::testing::TinyPagedCache;
using strata::testing::TinyRecompute;
using strata::testing::TinySelectiveOutput;
using strata::testing::TinyTransformer;

constexpr uint32_t kBlock = 16;
constexpr uint32_t kPad = 0;

TinyConfig Config() { return {.layers = 3, .q_heads = 4, .kv_heads = 2, .head_dim = 32}; }

KvLayout OracleLayout() {
  KvLayout layout = test_support::SmallLayout({.model_id = "tiny-oracle",
                                               .num_layers = 3,
                                               .num_kv_heads = 2,
                                               .head_dim = 32,
                                               .dtype = KvDtype::kFloat32,
                                               .chunk_tokens = kBlock});
  layout.positional = PositionalFormat::kNope;
  return layout;
}

// A chunk's KV in its pool pages: token t in page pages[t / block], slot t % block; plane 0 holds
// keys, plane 1 values, each row [kv_heads][head_dim] fp32.
float* Row(const PagedKvCache& pool, std::span<const uint32_t> pages, uint32_t layer,
           uint32_t plane, int64_t token) {
  std::byte* at = pool.planes[layer][plane] +
                  pages[token / kBlock] * pool.geometry.block_stride_bytes +
                  (token % kBlock) * pool.geometry.slot_stride_bytes;
  return reinterpret_cast<float*>(at);
}

void WriteChunk(const PagedKvCache& pool, std::span<const uint32_t> pages, const TinyKv& kv) {
  const int64_t width = Config().kv_width();
  for (uint32_t layer = 0; layer < kv.keys.size(); ++layer) {
    for (int64_t t = 0; t < kv.num_tokens(); ++t) {
      std::memcpy(Row(pool, pages, layer, 0, t), &kv.keys[layer][t * width], width * 4);
      std::memcpy(Row(pool, pages, layer, 1, t), &kv.values[layer][t * width], width * 4);
    }
  }
}

// The chunk's KV read from its pages, at positions 0..n-1.
TinyKv ReadChunk(const PagedKvCache& pool, std::span<const uint32_t> pages, int64_t tokens) {
  const int64_t width = Config().kv_width();
  TinyKv kv;
  kv.keys.resize(Config().layers);
  kv.values.resize(Config().layers);
  for (uint32_t layer = 0; layer < kv.keys.size(); ++layer) {
    for (int64_t t = 0; t < tokens; ++t) {
      const float* k = Row(pool, pages, layer, 0, t);
      const float* v = Row(pool, pages, layer, 1, t);
      kv.keys[layer].insert(kv.keys[layer].end(), k, k + width);
      kv.values[layer].insert(kv.values[layer].end(), v, v + width);
    }
  }
  kv.positions.resize(tokens);
  std::iota(kv.positions.begin(), kv.positions.end(), 0);
  return kv;
}

// One engine: a session mapping the pool, its PicRequests, and the model.
class OracleEngine {
 public:
  OracleEngine(const std::string& socket, std::string id, const TinyTransformer& model)
      : model_(model) {
    EngineClientOptions options;
    options.socket_path = socket;
    options.engine_id = std::move(id);
    options.layout = OracleLayout();
    options.device_runtime = &runtime_;
    client_ = *EngineClient::Create(std::move(options));
    requests_.emplace(*client_, hasher_,
                      PicRequestsOptions{.segments = {.block_tokens = kBlock, .pad_token = kPad}});
  }

  PicRequests& requests() { return *requests_; }

  // Places the request's chunks, computes the ones it was given to write into their pages (their
  // canonical NoPE KV: alone at positions 0.., after the policy's compile variant of dummy
  // tokens), and publishes them.
  PicRequest Begin(std::span<const uint32_t> prompt, std::span<const SegmentMarker> markers,
                   const PicPolicy& policy = {}) {
    absl::StatusOr<PicRequest> request = requests_->Begin(prompt, markers, {}, policy);
    EXPECT_TRUE(request.ok()) << request.status();
    for (const PicChunkPlacement& chunk : request->chunks) {
      if (chunk.source != PicChunkSource::kWrite) continue;
      WriteChunk(View(*request), chunk.pages, Compile(Tokens(*request, chunk.segment), policy));
    }
    EXPECT_TRUE(requests_->Publish(*request).ok());
    return *std::move(request);
  }

  // A chunk's canonical KV: prefilled after policy.compile_variant() dummy (pad) tokens, whose KV
  // is dropped, at positions 0.. of its own.
  TinyKv Compile(std::span<const uint32_t> chunk, const PicPolicy& policy) const {
    const auto dummies = static_cast<int64_t>(policy.compile_variant());
    std::vector<uint32_t> tokens(static_cast<size_t>(dummies), kPad);
    tokens.insert(tokens.end(), chunk.begin(), chunk.end());
    const TinyOutput out = *model_.Prefill(tokens);
    return out.kv.Slice(dummies, out.kv.num_tokens()).AtPositions(0);
  }

  // The padded tokens of segment `segment`.
  static std::span<const uint32_t> Tokens(const PicRequest& request, size_t segment) {
    const PicSegment& s = request.prompt.segments[segment];
    return std::span(request.prompt.padded_tokens).subspan(s.padded_begin, s.padded_tokens());
  }

  PagedKvCache View(const PicRequest& request) const {
    return *DevicePoolAsPagedKvCache(OracleLayout(), kBlock, request.pool->grant().geometry,
                                     request.pool->base());
  }

  // What the request's policy recomputes (ALGORITHMS.md section 3): its tokens recomputed from
  // layer 0, and CacheBlend's selection at its check layer.
  static TinyRecompute Plan(const PicRequest& request) {
    TinyRecompute plan;
    for (const PicTokenRange& range : request.recomputed_from_layer_zero(kBlock)) {
      for (uint32_t t = range.begin; t < range.end; ++t) {
        plan.always.push_back(static_cast<int32_t>(t));
      }
    }
    if (request.policy.recompute == PicRecompute::kCacheBlend) {
      plan.check_layer = request.policy.check_layer;
      plan.ratio = request.policy.blend_ratio;
    }
    return plan;
  }

  // The request computed with `plan` over the padded prompt: the shared chunks' KV read from their
  // pool pages at their positions here, every other token's cache empty (zero rows: they are
  // recomputed). The question (the last segment, always recomputed) is the output's last rows.
  TinySelectiveOutput Compute(const PicRequest& request, const TinyRecompute& plan) const {
    TinyKv cached;
    size_t next_chunk = 0;
    for (size_t i = 0; i < request.prompt.segments.size(); ++i) {
      const PicSegment& segment = request.prompt.segments[i];
      const auto tokens = static_cast<int64_t>(segment.padded_tokens());
      const PicChunkPlacement* chunk =
          segment.kind == SegmentKind::kChunk ? &request.chunks[next_chunk++] : nullptr;
      TinyKv kv;
      if (chunk != nullptr && chunk->source == PicChunkSource::kShared) {
        kv = ReadChunk(View(request), chunk->pages, tokens);
      } else {
        kv = TinyKv::Zeros(Config(), tokens);
      }
      cached = cached.Concat(kv.AtPositions(segment.padded_begin));
    }
    absl::StatusOr<TinySelectiveOutput> out =
        model_.SelectivePrefill(request.prompt.padded_tokens, cached, plan);
    EXPECT_TRUE(out.ok()) << out.status();
    return *std::move(out);
  }

  // MEPIC (or LegoLink-k) as an engine runs it, with no copy of the shared chunks: the plan's
  // block table (pic_plan.h) names this engine's own blocks for the blocks it recomputes in (the
  // prompt segments, block 1 of each shared chunk) and the pool's pages, read in place through the
  // mapping, for the rest. A shared chunk's block that is recomputed only in part (LegoLink-k, k
  // not a whole number of blocks) is first filled from its page: one block per chunk, never the
  // chunk. Returns the output and how many engine blocks it used.
  std::pair<TinySelectiveOutput, int64_t> ComputePaged(const PicRequest& request) const {
    const TinyConfig c = Config();
    const PicBlockTable table = ToPicPlan(request, kBlock, PositionalFormat::kNope).block_table;
    const auto engine_blocks = static_cast<int32_t>(table.own_blocks);
    std::vector<int32_t> own(engine_blocks);
    std::iota(own.begin(), own.end(), 0);
    TinyPagedCache cache;
    cache.block_table = *table.AttentionTable(own, engine_blocks);
    for (const PicBlock& block : table.blocks) cache.block_positions.push_back(block.position);
    std::vector<int32_t> recompute;
    for (const PicTokenRange& range : request.recomputed_from_layer_zero(kBlock)) {
      for (uint32_t t = range.begin; t < range.end; ++t)
        recompute.push_back(static_cast<int32_t>(t));
    }
    std::vector<std::pair<int32_t, uint32_t>> copied;  // (engine block, pool page)
    for (const PicBlock& block : table.blocks) {
      if (block.fill_from_page.has_value()) copied.emplace_back(block.index, *block.fill_from_page);
    }

    const PagedKvCache pool = View(request);
    const PagedKvGeometry& g = pool.geometry;
    cache.shared_spec = {.dtype = KvDtype::kFloat32,
                         .num_planes = 2,
                         .num_blocks = g.num_blocks,
                         .block_size = g.block_size,
                         .num_kv_heads = g.num_kv_heads,
                         .head_dim = g.head_dim,
                         .block_stride = g.block_stride_bytes / 4,
                         .slot_stride = g.slot_stride_bytes / 4,
                         .head_stride = g.head_stride_bytes / 4};
    const auto pool_extent = static_cast<int64_t>(pool.plane_extent_bytes / 4);
    cache.engine_spec = kernels::PagedKvSpec::Contiguous(KvDtype::kFloat32, 2, engine_blocks,
                                                         kBlock, c.kv_heads, c.head_dim);
    const int64_t engine_extent = engine_blocks * kBlock * c.kv_width();
    std::vector<std::vector<float>> engine_k(c.layers, std::vector<float>(engine_extent));
    std::vector<std::vector<float>> engine_v(c.layers, std::vector<float>(engine_extent));
    for (int64_t l = 0; l < c.layers; ++l) {
      for (const auto& [block, page] : copied) {
        const std::span<const uint32_t> pages(&page, 1);
        for (int64_t t = 0; t < kBlock; ++t) {
          const int64_t row = (block * kBlock + t) * c.kv_width();
          std::memcpy(&engine_k[l][row], Row(pool, pages, l, 0, t), c.kv_width() * 4);
          std::memcpy(&engine_v[l][row], Row(pool, pages, l, 1, t), c.kv_width() * 4);
        }
      }
      cache.engine.push_back(kernels::PagedKvLayer::FromSeparatePlanes(
          engine_k[l].data(), engine_extent, engine_v[l].data(), engine_extent));
      cache.shared.push_back(kernels::PagedKvLayer::FromSeparatePlanes(
          pool.planes[l][0], pool_extent, pool.planes[l][1], pool_extent));
    }
    absl::StatusOr<TinySelectiveOutput> out =
        model_.PagedSelectivePrefill(request.prompt.padded_tokens, cache, recompute);
    EXPECT_TRUE(out.ok()) << out.status();
    return {*std::move(out), engine_blocks};
  }

 private:
  const TinyTransformer& model_;
  storage::HostRuntime runtime_;
  KeyHasher hasher_ = *KeyHasher::Create(OracleLayout(), {});
  std::unique_ptr<EngineClient> client_;
  std::optional<PicRequests> requests_;
};

struct Prompt {
  std::vector<uint32_t> tokens;
  std::vector<SegmentMarker> markers;
};
Prompt Compose(const std::vector<uint32_t>& system,
               const std::vector<std::vector<uint32_t>>& chunks,
               const std::vector<uint32_t>& question) {
  Prompt prompt{.tokens = system};
  for (const std::vector<uint32_t>& chunk : chunks) {
    const auto begin = static_cast<uint32_t>(prompt.tokens.size());
    prompt.tokens.insert(prompt.tokens.end(), chunk.begin(), chunk.end());
    prompt.markers.push_back({begin, static_cast<uint32_t>(prompt.tokens.size())});
  }
  prompt.tokens.insert(prompt.tokens.end(), question.begin(), question.end());
  return prompt;
}

TEST(PicOracleTest, MepicReuseThroughTheDaemonAgainstFullPrefill) {
  const TinyTransformer model = *TinyTransformer::Create(Config());
  // 3 layers x 8 KiB per 16-token page: 64 pages.
  testing::TestDaemon daemon({.device_pool_bytes = 64 * 3 * 8192});
  ASSERT_TRUE(daemon.Start().ok());
  const std::vector<uint32_t> system = RandomTokens(20, 1), a = RandomTokens(40, 2),
                              b = RandomTokens(56, 3), question = RandomTokens(12, 4);
  const int64_t hidden = Config().hidden();
  const int64_t width = Config().kv_width();

  // Engine 1 sees [S][A][B][Q]: nothing is cached, it computes A and B alone into the pool.
  OracleEngine writer(daemon.socket_path(), "writer", model);
  const Prompt first = Compose(system, {a, b}, question);
  PicRequest written = writer.Begin(first.tokens, first.markers);
  ASSERT_EQ(written.chunks.size(), 2u);
  for (const PicChunkPlacement& chunk : written.chunks) {
    ASSERT_EQ(chunk.source, PicChunkSource::kShared) << "written, published, and kept";
  }

  // Engine 2 sees [S][B][A][Q]: both passages at other offsets, shared in place.
  OracleEngine reader(daemon.socket_path(), "reader", model);
  const Prompt second = Compose(system, {b, a}, question);
  PicRequest shared = reader.Begin(second.tokens, second.markers);
  ASSERT_EQ(shared.chunks.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(shared.chunks[i].source, PicChunkSource::kShared) << shared.chunks[i].why_private;
  }
  EXPECT_EQ(shared.chunks[0].pages, written.chunks[1].pages) << "B's pages, not a copy";
  EXPECT_EQ(shared.chunks[1].pages, written.chunks[0].pages) << "A's pages, not a copy";

  // The pool holds each chunk's canonical KV (computed alone) byte for byte, for every reader.
  for (size_t i = 0; i < 2; ++i) {
    const std::span<const uint32_t> tokens = OracleEngine::Tokens(shared, shared.chunks[i].segment);
    const TinyOutput alone = *model.Prefill(tokens);
    const TinyKv pooled = ReadChunk(reader.View(shared), shared.chunks[i].pages, tokens.size());
    for (int64_t l = 0; l < Config().layers; ++l) {
      EXPECT_EQ(pooled.keys[l], alone.kv.keys[l]) << "chunk " << i << " layer " << l;
      EXPECT_EQ(pooled.values[l], alone.kv.values[l]) << "chunk " << i << " layer " << l;
    }
  }

  // Full prefill of the padded prompt is the reference.
  const TinyOutput full = *model.Prefill(shared.prompt.padded_tokens);
  const PicSegment& q = shared.prompt.segments.back();
  ASSERT_EQ(q.kind, SegmentKind::kPrompt);
  const std::span<const float> expected =
      Rows(full.hidden, hidden, q.padded_begin, q.padded_begin + q.padded_tokens());

  // The reader's question under each policy, against full prefill. Each policy is a request of
  // its own over the same prompt (one option per request).
  const auto question_rows = static_cast<int64_t>(q.padded_tokens());
  auto deviation_of = [&](const std::string& name, const PicRequest& request,
                          const TinyRecompute& plan) {
    const TinySelectiveOutput out = reader.Compute(request, plan);
    const auto rows = static_cast<int64_t>(out.recomputed.size());
    const double deviation =
        RelativeDifference(Rows(out.hidden, hidden, rows - question_rows, rows), expected);
    std::printf("%-34s recomputes %3lld of %zu tokens: deviation of the question %.6f\n",
                name.c_str(), static_cast<long long>(rows), shared.prompt.padded_tokens.size(),
                deviation);
    return std::make_pair(deviation, out);
  };
  auto run = [&](const std::string& name, const PicPolicy& policy) {
    PicRequest request = reader.Begin(second.tokens, second.markers, policy);
    for (const PicChunkPlacement& chunk : request.chunks) {
      EXPECT_EQ(chunk.source, PicChunkSource::kShared) << name << ": " << chunk.why_private;
    }
    auto [deviation, out] = deviation_of(name, request, OracleEngine::Plan(request));
    EXPECT_EQ(out.recomputed.size(), request.recomputed_tokens(kBlock))
        << name << ": the connector's count is what the engine recomputes";
    EXPECT_TRUE(reader.requests().End(request).ok());
    return std::make_pair(deviation, out);
  };

  // No recompute: the chunks compiled alone read as they are, only the prompt segments computed.
  TinyRecompute prompt_only;
  for (const PicSegment& segment : shared.prompt.segments) {
    if (segment.kind == SegmentKind::kChunk) continue;
    for (uint32_t t = segment.padded_begin; t < segment.padded_begin + segment.padded_tokens();
         ++t) {
      prompt_only.always.push_back(static_cast<int32_t>(t));
    }
  }
  const double none = deviation_of("no recompute", shared, prompt_only).first;
  auto legolink = [&](uint32_t k) {
    return run(k < (1 << 20) ? fmt::format("LegoLink-{}", k)
                             : "every chunk (LegoLink-k, k past all)",
               {.recompute = PicRecompute::kLegoLink, .legolink_tokens = k})
        .first;
  };
  const double lego4 = legolink(4);
  const auto [mepic, mepic_out] = run("MEPIC (block 1 of each chunk)", {});
  const double lego32 = legolink(32);
  const double every_chunk = legolink(1 << 20);
  auto blend = [&](double ratio) {
    return run(fmt::format("CacheBlend r={:.2f} (check layer 1)", ratio),
               {.recompute = PicRecompute::kCacheBlend, .check_layer = 1, .blend_ratio = ratio})
        .first;
  };
  const double blend15 = blend(0.15), blend50 = blend(0.5), blend100 = blend(1.0);

  EXPECT_GT(none, 1e-3) << "reuse without recompute is an approximation";
  EXPECT_LT(lego4, none) << "LegoLink's recomputed tokens reduce the deviation";
  EXPECT_LT(mepic, lego4) << "and more of them reduce it more";
  EXPECT_LT(lego32, mepic);
  EXPECT_LT(every_chunk, 1e-5) << "recomputing every chunk is full prefill";
  EXPECT_LT(blend50, blend15) << "CacheBlend's deviation falls as its ratio grows";
  EXPECT_LT(blend100, 1e-5) << "CacheBlend at ratio 1 is full prefill";
  EXPECT_LT(blend15, none);

  // B follows the system prompt exactly: MEPIC's recomputed block 1 of it is full prefill's.
  const PicSegment& b_segment = shared.prompt.segments[shared.chunks[0].segment];
  for (int64_t l = 0; l < Config().layers; ++l) {
    EXPECT_LT(RelativeDifference(Rows(mepic_out.kv.keys[l], width, b_segment.padded_begin,
                                      b_segment.padded_begin + kBlock),
                                 Rows(full.kv.keys[l], width, b_segment.padded_begin,
                                      b_segment.padded_begin + kBlock)),
              1e-5)
        << "layer " << l;
  }

  // MEPIC and LegoLink-k as an engine runs them: the reader's block table names its own blocks and
  // the pool's pages (kernels::PagedAttention over both caches): the same output as over a copy,
  // with engine blocks only for the blocks it recomputes in.
  for (const PicPolicy& policy :
       {PicPolicy{}, PicPolicy{.recompute = PicRecompute::kLegoLink, .legolink_tokens = 4},
        PicPolicy{.recompute = PicRecompute::kLegoLink, .legolink_tokens = 32}}) {
    PicRequest in_place = reader.Begin(second.tokens, second.markers, policy);
    const auto [paged, engine_blocks] = reader.ComputePaged(in_place);
    const TinySelectiveOutput copy = reader.Compute(in_place, OracleEngine::Plan(in_place));
    const auto total_blocks =
        static_cast<int64_t>((in_place.prompt.padded_tokens.size() + kBlock - 1) / kBlock);
    const auto rows = static_cast<int64_t>(paged.recomputed.size());
    std::printf(
        "%s over the pool's pages in place: %lld engine blocks of %lld, deviation %.6f\n",
        policy.recompute == PicRecompute::kMepic
            ? "MEPIC"
            : fmt::format("LegoLink-{}", policy.legolink_tokens).c_str(),
        static_cast<long long>(engine_blocks), static_cast<long long>(total_blocks),
        RelativeDifference(Rows(paged.hidden, hidden, rows - q.padded_tokens(), rows), expected));
    EXPECT_LT(RelativeDifference(paged.hidden, copy.hidden), 1e-5)
        << "attention over the pool's pages in place equals attention over their copy";
    int64_t blocks_recomputed_in = 0;
    for (int64_t b = 0; b < total_blocks; ++b) {
      for (const PicTokenRange& range : in_place.recomputed_from_layer_zero(kBlock)) {
        if (range.begin < (b + 1) * kBlock && range.end > b * kBlock) {
          ++blocks_recomputed_in;
          break;
        }
      }
    }
    EXPECT_EQ(engine_blocks, blocks_recomputed_in)
        << "the engine holds blocks only for the blocks it recomputes in";
    EXPECT_TRUE(reader.requests().End(in_place).ok());
  }

  // LegoLink-0: the chunks compiled after the dummies are chunks of their own, written once by
  // the writer and shared by the reader with nothing of them recomputed.
  const PicPolicy zero{.recompute = PicRecompute::kLegoLinkZero};
  PicRequest compiled = writer.Begin(first.tokens, first.markers, zero);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(compiled.chunks[i].source, PicChunkSource::kShared);
    EXPECT_NE(compiled.chunks[i].pages, written.chunks[i].pages) << "another compile variant";
  }
  const double lego0 = run("LegoLink-0 (3 dummies at compile)", zero).first;
  EXPECT_GT(lego0, 0.0);
  EXPECT_LT(lego0, 1.0) << "an approximation, not noise";
  ASSERT_TRUE(writer.requests().End(compiled).ok());

  ASSERT_TRUE(writer.requests().End(written).ok());
  ASSERT_TRUE(reader.requests().End(shared).ok());
  EXPECT_EQ((*daemon.device_pools()->ForLayout(OracleLayout()))->Stats().references, 0u);
}

// A chunk Compress thinned in the host tier (drop_sink_recent: its sink block and recent window)
// reaches a reader as its kept blocks: pool pages holding, byte for byte, the writer's KV of
// those blocks, each with its position in the chunk; the block table reads them in place at
// those positions, recomputes MEPIC's block 1 as always, and has no entry for a dropped block.
// CacheBlend, which runs every token of a shared chunk, computes the chunk privately instead.
TEST(PicOracleTest, AThinnedChunkIsReadAsItsKeptBlocksAtTheirPositions) {
  const TinyTransformer model = *TinyTransformer::Create(Config());
  // 8 pages: chunk A (8 blocks) fills the pool, and B's write evicts it to the host tier.
  testing::TestDaemon daemon({.device_pool_bytes = 8 * 3 * 8192});
  ASSERT_TRUE(daemon.Start().ok());
  const std::vector<uint32_t> system = RandomTokens(20, 1), a = RandomTokens(8 * kBlock, 2),
                              b = RandomTokens(2 * kBlock, 3), question = RandomTokens(12, 4);
  OracleEngine writer(daemon.socket_path(), "writer", model);
  ChunkKey a_key;
  for (const std::vector<uint32_t>* passage : {&a, &b}) {
    const Prompt prompt = Compose(system, {*passage}, question);
    PicRequest request = writer.Begin(prompt.tokens, prompt.markers);
    ASSERT_EQ(request.chunks[0].source, PicChunkSource::kShared) << request.chunks[0].why_private;
    if (passage == &a) a_key = request.prompt.segments[request.chunks[0].segment].key;
    ASSERT_TRUE(writer.requests().End(request).ok());
  }
  ASSERT_TRUE(daemon.tier()->Contains(a_key)) << "demoted whole when B's write evicted it";

  // Thinned in the host tier: blocks 0 (sink), 6 and 7 (recent) kept.
  const KvLayout layout = OracleLayout();
  absl::StatusOr<storage::RecodeTotals> thinned =
      daemon.store()->Recode(std::vector<ChunkKey>{a_key}, storage::Tier::kHost,
                             {.codec = *storage::CodecRegistry::Find("drop_sink_recent"),
                              .params = {.sink_tokens = kBlock, .recent_tokens = 2 * kBlock},
                              .layout = &layout});
  ASSERT_TRUE(thinned.ok()) << thinned.status();
  ASSERT_EQ(thinned->recoded, 1u);

  OracleEngine reader(daemon.socket_path(), "reader", model);
  const Prompt prompt = Compose(system, {a}, question);
  PicRequest request = reader.Begin(prompt.tokens, prompt.markers);
  const PicChunkPlacement& chunk = request.chunks[0];
  ASSERT_EQ(chunk.source, PicChunkSource::kShared) << chunk.why_private;
  const std::vector<uint32_t> positions = {0, 6 * kBlock, 7 * kBlock};
  ASSERT_EQ(chunk.positions, positions);
  ASSERT_EQ(chunk.pages.size(), 3u);

  // Each kept page holds the writer's KV of its block.
  const TinyKv computed = reader.Compile(OracleEngine::Tokens(request, chunk.segment), {});
  const int64_t width = Config().kv_width();
  const PagedKvCache pool = reader.View(request);
  for (size_t k = 0; k < positions.size(); ++k) {
    for (uint32_t layer = 0; layer < 3; ++layer) {
      for (int64_t t = 0; t < kBlock; ++t) {
        const int64_t token = positions[k] + t;
        const std::span<const uint32_t> page(&chunk.pages[k], 1);
        EXPECT_EQ(0, std::memcmp(Row(pool, page, layer, 0, t), &computed.keys[layer][token * width],
                                 width * 4))
            << "keys of token " << token << " layer " << layer;
        EXPECT_EQ(0, std::memcmp(Row(pool, page, layer, 1, t),
                                 &computed.values[layer][token * width], width * 4))
            << "values of token " << token << " layer " << layer;
      }
    }
  }

  // The block table: A's block 0 recomputed (MEPIC) in an own block, blocks 1..5 gone, 6 and 7
  // read in place at their positions in the prompt.
  const PicPlan plan = ToPicPlan(request, kBlock, PositionalFormat::kNope);
  const PicChunk& planned = plan.chunks[0];
  EXPECT_EQ(planned.pool_page_positions, positions);
  const size_t padded_blocks = (plan.padded_tokens.size() + kBlock - 1) / kBlock;
  ASSERT_EQ(plan.block_table.blocks.size(), padded_blocks - 5);
  std::vector<uint32_t> in_a;  // positions of A's blocks in the table
  for (size_t i = 0; i < plan.block_table.blocks.size(); ++i) {
    const PicBlock& block = plan.block_table.blocks[i];
    if (i > 0) {
      EXPECT_GT(block.position, plan.block_table.blocks[i - 1].position);
    }
    if (block.position < planned.padded.begin || block.position >= planned.padded.end) continue;
    in_a.push_back(block.position - planned.padded.begin);
    if (block.position == planned.padded.begin) {
      EXPECT_FALSE(block.pool) << "MEPIC's block 1 is recomputed";
      EXPECT_FALSE(block.fill_from_page.has_value()) << "whole: nothing to fill";
    } else {
      EXPECT_TRUE(block.pool);
      EXPECT_EQ(block.index, block.position == planned.padded.begin + 6 * kBlock ? chunk.pages[1]
                                                                                 : chunk.pages[2]);
    }
  }
  EXPECT_EQ(in_a, positions);

  // Run as an engine runs MEPIC (its own blocks and the kept pages in place, each at its
  // position), the question attends to exactly the tokens that are left: the system prompt and
  // A's first block recomputed, and A's last two blocks (kept) as the writer computed them, at
  // A's offset here. Reference: Prefill and Extend over that context.
  const auto [paged, engine_blocks] = reader.ComputePaged(request);
  const PicSegment& s_segment = request.prompt.segments[0];
  const PicSegment& q_segment = request.prompt.segments.back();
  ASSERT_EQ(s_segment.kind, SegmentKind::kPrompt);
  ASSERT_EQ(q_segment.kind, SegmentKind::kPrompt);
  const TinyOutput s_out = *model.Prefill(OracleEngine::Tokens(request, 0));
  const TinyOutput a0_out = *model.Extend(
      s_out.kv, OracleEngine::Tokens(request, chunk.segment).first(kBlock), planned.padded.begin);
  const TinyKv context = s_out.kv.Concat(a0_out.kv).Concat(
      computed.Slice(6 * kBlock, 8 * kBlock).AtPositions(planned.padded.begin + 6 * kBlock));
  const TinyOutput q_out =
      *model.Extend(context, OracleEngine::Tokens(request, request.prompt.segments.size() - 1),
                    q_segment.padded_begin);
  const int64_t hidden = Config().hidden();
  const auto rows = static_cast<int64_t>(paged.recomputed.size());
  const auto q_rows = static_cast<int64_t>(q_segment.padded_tokens());
  const double deviation =
      RelativeDifference(Rows(paged.hidden, hidden, rows - q_rows, rows), q_out.hidden);
  std::printf("MEPIC over a thinned chunk (3 of 8 blocks kept) in place: deviation %.2e\n",
              deviation);
  EXPECT_LT(deviation, 1e-5) << "the kept blocks at their positions, and nothing else";
  EXPECT_EQ(engine_blocks, static_cast<int64_t>(plan.block_table.own_blocks));
  ASSERT_TRUE(reader.requests().End(request).ok());

  // CacheBlend reads every token of a shared chunk: it computes the thinned one privately.
  PicRequest blended =
      reader.Begin(prompt.tokens, prompt.markers, {.recompute = PicRecompute::kCacheBlend});
  EXPECT_EQ(blended.chunks[0].source, PicChunkSource::kPrivate);
  EXPECT_NE(blended.chunks[0].why_private.message().find("CacheBlend"), std::string::npos)
      << blended.chunks[0].why_private;
  ASSERT_TRUE(reader.requests().End(blended).ok());
  EXPECT_EQ((*daemon.device_pools()->ForLayout(OracleLayout()))->Stats().references, 0u)
      << "the refused chunk's reference was given back";
}

// drop_h2o keeps the blocks the engines reported heaviest: the writer reports the attention A's
// tokens received (its block 4 the heaviest), the host tier thins A by it, and a reader gets
// the sink, that block and the recent window. A chunk no engine reported is left whole.
TEST(PicOracleTest, DropH2oKeepsTheBlocksEnginesReportedHeaviest) {
  const TinyTransformer model = *TinyTransformer::Create(Config());
  testing::TestDaemon daemon({.device_pool_bytes = 8 * 3 * 8192});
  ASSERT_TRUE(daemon.Start().ok());
  const std::vector<uint32_t> system = RandomTokens(20, 1), a = RandomTokens(8 * kBlock, 2),
                              b = RandomTokens(8 * kBlock, 3), question = RandomTokens(12, 4);
  OracleEngine writer(daemon.socket_path(), "writer", model);
  std::vector<ChunkKey> keys;
  for (const std::vector<uint32_t>* passage : {&a, &b}) {
    const Prompt prompt = Compose(system, {*passage}, question);
    PicRequest request = writer.Begin(prompt.tokens, prompt.markers);
    const PicSegment& segment = request.prompt.segments[request.chunks[0].segment];
    keys.push_back(segment.key);
    if (passage == &a) {
      std::vector<float> importance(segment.padded_tokens(), 0.01f);
      for (uint32_t t = 3 * kBlock; t < 4 * kBlock; ++t) importance[t] = 1.0f;
      // Two reports, summed: block 4 stays the heaviest.
      ASSERT_TRUE(writer.requests().ReportImportance(request, 0, importance).ok());
      ASSERT_TRUE(writer.requests().ReportImportance(request, 0, importance).ok());
      EXPECT_EQ(writer.requests().ReportImportance(request, 0, std::vector<float>(3, 1.0f)).code(),
                absl::StatusCode::kInvalidArgument)
          << "one value per token of the chunk";
      EXPECT_EQ(writer.requests().ReportImportance(request, 1, importance).code(),
                absl::StatusCode::kOutOfRange);
      importance[5] = -1;
      EXPECT_EQ(writer.requests().ReportImportance(request, 0, importance).code(),
                absl::StatusCode::kInvalidArgument)
          << "the daemon refuses a negative importance";
    }
    ASSERT_TRUE(writer.requests().End(request).ok());
  }
  ASSERT_TRUE(daemon.tier()->Contains(keys[0])) << "A was evicted whole by B's write";
  const KvLayout layout = OracleLayout();
  absl::StatusOr<storage::RecodeTotals> thinned =
      daemon.store()->Recode(keys, storage::Tier::kHost,
                             {.codec = *storage::CodecRegistry::Find("drop_h2o"),
                              .params = {.sink_tokens = kBlock, .recent_tokens = kBlock},
                              .layout = &layout});
  ASSERT_TRUE(thinned.ok()) << thinned.status();
  EXPECT_EQ(thinned->recoded, 1u) << "A";
  EXPECT_EQ(thinned->missing, 1u) << "B is in the pool, not the host tier";

  OracleEngine reader(daemon.socket_path(), "reader", model);
  const Prompt prompt = Compose(system, {a}, question);
  PicRequest request = reader.Begin(prompt.tokens, prompt.markers);
  ASSERT_EQ(request.chunks[0].source, PicChunkSource::kShared) << request.chunks[0].why_private;
  EXPECT_EQ(request.chunks[0].positions, (std::vector<uint32_t>{0, 3 * kBlock, 7 * kBlock}));
  ASSERT_TRUE(reader.requests().End(request).ok());

  // A chunk no engine reported: left whole, counted.
  const ChunkKey unreported = KeyHasher::Create(layout, {})->PicKey(RandomTokens(64, 9), 0);
  {
    absl::StatusOr<storage::ReserveResult> r =
        daemon.tier()->ReserveSized(unreported, layout.chunk_bytes(64), {.num_tokens = 64});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(daemon.tier()->Commit(std::move(r->reservation)).ok());
  }
  thinned = daemon.store()->Recode(
      std::vector<ChunkKey>{unreported}, storage::Tier::kHost,
      {.codec = *storage::CodecRegistry::Find("drop_h2o"), .layout = &layout});
  ASSERT_TRUE(thinned.ok()) << thinned.status();
  EXPECT_EQ(thinned->no_importance, 1u);
  EXPECT_EQ(thinned->recoded, 0u);
  EXPECT_FALSE(daemon.tier()->HoldsEncoded(unreported));
}

}  // namespace
}  // namespace strata::connector::internal
