// The correctness oracle of position-independent reuse (ALGORITHMS.md section 3) run through the
// daemon's device pool and the connector: a tiny CPU transformer (tests/support/tiny_transformer.h,
// fp32 KV, NoPE keys) is the engine. Its chunks are computed once, alone, written into the pool
// pages PicRequests reserved, published, and read in place by another engine's request that holds
// the same passages at other offsets. MEPIC's compute path then recomputes block 1 of each chunk
// in its context and attends over blocks 2..n from the pool at their positions here.
//
// Checked: the pool's pages hold, byte for byte, what the writer computed, for every reader; the
// block recomputed after an exact prefix equals full prefill's; recomputing every chunk equals
// full prefill; and the question's deviation from full prefill falls as the recompute budget grows
// (no recompute, MEPIC's one block per chunk, whole chunks), each budget's deviation printed.
#include <cstdio>
#include <cstring>
#include <random>

#include "connector/src/device_pool_view.h"
#include "connector/src/pic_requests.h"
#include "connector/src/testing/test_daemon.h"
#include "gtest/gtest.h"
#include "storage/device/host_runtime.h"
#include "tests/support/test_layout.h"
#include "tests/support/tiny_transformer.h"

namespace strata::connector::internal {
namespace {

using std::chrono::milliseconds;
using strata::testing::RelativeDifference;
using strata::testing::TinyConfig;
using strata::testing::TinyKv;
using strata::testing::TinyOutput;
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

std::vector<uint32_t> RandomTokens(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> tokens(n);
  for (uint32_t& t : tokens) t = 1 + static_cast<uint32_t>(rng() % 511);  // never the pad
  return tokens;
}

// Rows [begin, end) of a row-major matrix of `width` columns.
std::vector<float> Rows(const std::vector<float>& m, int64_t width, int64_t begin, int64_t end) {
  return {m.begin() + begin * width, m.begin() + end * width};
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

  // Places the request's chunks, computes the ones it was given to write (alone, at positions
  // 0.., NoPE keys: their canonical KV) into their pages, and publishes them.
  PicRequest Begin(std::span<const uint32_t> prompt, std::span<const SegmentMarker> markers) {
    absl::StatusOr<PicRequest> request = requests_->Begin(prompt, markers);
    EXPECT_TRUE(request.ok()) << request.status();
    for (const PicChunkPlacement& chunk : request->chunks) {
      if (chunk.source != PicChunkSource::kWrite) continue;
      const TinyOutput alone = *model_.Prefill(Tokens(*request, chunk.segment));
      WriteChunk(View(*request), chunk.pages, alone.kv);
    }
    EXPECT_TRUE(requests_->Publish(*request).ok());
    return *std::move(request);
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

  // MEPIC's compute path over the request: prompt segments computed in context; each shared
  // chunk's first `recompute` tokens (a multiple of the block; the whole chunk at most) computed
  // in context, the rest read from its pool pages at its positions here. Returns the last
  // computed segment's output (the question's hidden rows) with the whole context's KV.
  TinyOutput Compute(const PicRequest& request, int64_t recompute) const {
    TinyKv context;
    context.keys.resize(Config().layers);
    context.values.resize(Config().layers);
    TinyOutput last;
    size_t next_chunk = 0;
    for (size_t i = 0; i < request.prompt.segments.size(); ++i) {
      const PicSegment& segment = request.prompt.segments[i];
      const std::span<const uint32_t> tokens = Tokens(request, i);
      const int64_t position = segment.padded_begin;
      int64_t computed = static_cast<int64_t>(tokens.size());
      const PicChunkPlacement* chunk = nullptr;
      if (segment.kind == SegmentKind::kChunk) {
        chunk = &request.chunks[next_chunk++];
        if (chunk->source == PicChunkSource::kShared) {
          computed = std::min<int64_t>(recompute, static_cast<int64_t>(tokens.size()));
        }
      }
      if (computed > 0) {
        last = *model_.Extend(context, tokens.first(static_cast<size_t>(computed)), position);
        context = context.Concat(last.kv);
      }
      if (computed < static_cast<int64_t>(tokens.size())) {
        const TinyKv cached = ReadChunk(View(request), chunk->pages, tokens.size());
        context = context.Concat(cached.Slice(computed, static_cast<int64_t>(tokens.size()))
                                     .AtPositions(position + computed));
      }
    }
    last.kv = context;
    return last;
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
  const std::vector<float> expected =
      Rows(full.hidden, hidden, q.padded_begin, q.padded_begin + q.padded_tokens());

  std::vector<double> deviations;
  const std::vector<int64_t> budgets = {0, kBlock, 1 << 20};
  for (const int64_t recompute : budgets) {
    const TinyOutput out = reader.Compute(shared, recompute);
    deviations.push_back(RelativeDifference(out.hidden, expected));
    std::printf("recompute %s: deviation of the question's output from full prefill %.6f\n",
                recompute == 0        ? "none"
                : recompute == kBlock ? "one block per chunk (MEPIC)"
                                      : "every chunk",
                deviations.back());
    if (recompute == kBlock) {
      // B follows the system prompt exactly: its recomputed block 1 is full prefill's.
      const PicSegment& b_segment = shared.prompt.segments[shared.chunks[0].segment];
      for (int64_t l = 0; l < Config().layers; ++l) {
        const std::vector<float> recomputed =
            Rows(out.kv.keys[l], width, b_segment.padded_begin, b_segment.padded_begin + kBlock);
        EXPECT_LT(
            RelativeDifference(recomputed, Rows(full.kv.keys[l], width, b_segment.padded_begin,
                                                b_segment.padded_begin + kBlock)),
            1e-5)
            << "layer " << l;
      }
    }
  }
  EXPECT_GT(deviations[0], 1e-3) << "reuse without recompute is an approximation";
  EXPECT_LT(deviations[1], deviations[0]) << "MEPIC's recomputed block reduces the deviation";
  EXPECT_LT(deviations[2], 1e-5) << "recomputing every chunk is full prefill";

  ASSERT_TRUE(writer.requests().End(written).ok());
  ASSERT_TRUE(reader.requests().End(shared).ok());
  EXPECT_EQ((*daemon.device_pools()->ForLayout(OracleLayout()))->Stats().references, 0u);
}

}  // namespace
}  // namespace strata::connector::internal
