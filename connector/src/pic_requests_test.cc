// PicRequests against the daemon's real session server with a device pool (TestDaemon, HostRuntime
// pool of 8 pages): chunks written by one request are shared in place by the next, at another
// offset; admission, another writer, bad markers, a daemon without a pool and a dropped session
// leave chunks private and never fail the request.
#include "connector/src/pic_requests.h"

#include <cstring>
#include <numeric>
#include <thread>

#include "connector/src/testing/pool_pages.h"
#include "connector/src/testing/test_daemon.h"
#include "gtest/gtest.h"
#include "storage/device/host_runtime.h"
#include "tests/support/test_layout.h"

namespace strata::connector::internal {
namespace {

using std::chrono::milliseconds;
using testing::FillPoolPages;
using testing::PoolPagesHold;
using testing::TestDaemon;

constexpr uint32_t kBlock = 16;

KvLayout Layout() { return test_support::SmallLayout({.model_id = "pic-requests-test"}); }

// `n` tokens starting at `first`.
std::vector<uint32_t> Passage(uint32_t first, uint32_t n) {
  std::vector<uint32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// A prompt of `head` tokens of its own, then `passages` (each a marked chunk), then a question.
struct Prompt {
  std::vector<uint32_t> tokens;
  std::vector<SegmentMarker> markers;
};
Prompt Compose(uint32_t head, const std::vector<std::vector<uint32_t>>& passages) {
  Prompt prompt;
  prompt.tokens = Passage(900000, head);
  for (const std::vector<uint32_t>& passage : passages) {
    const auto begin = static_cast<uint32_t>(prompt.tokens.size());
    prompt.tokens.insert(prompt.tokens.end(), passage.begin(), passage.end());
    prompt.markers.push_back({begin, static_cast<uint32_t>(prompt.tokens.size())});
  }
  const std::vector<uint32_t> question = Passage(800000, 5);
  prompt.tokens.insert(prompt.tokens.end(), question.begin(), question.end());
  return prompt;
}

std::vector<PicChunkSource> Sources(const PicRequest& request) {
  std::vector<PicChunkSource> out;
  for (const PicChunkPlacement& chunk : request.chunks) out.push_back(chunk.source);
  return out;
}

// One engine: its session (mapping the pool through a HostRuntime) and its PicRequests.
struct Engine {
  Engine(const std::string& socket, std::string id, uint32_t block_tokens = kBlock) {
    EngineClientOptions options;
    options.socket_path = socket;
    options.engine_id = std::move(id);
    options.layout = Layout();
    options.device_runtime = &runtime;
    options.reconnect_min_backoff = milliseconds(1);
    options.reconnect_max_backoff = milliseconds(1);
    client = *EngineClient::Create(std::move(options));
    requests.emplace(
        *client, hasher,
        PicRequestsOptions{.segments = {.block_tokens = block_tokens, .pad_token = 7}});
  }
  storage::HostRuntime runtime;
  KeyHasher hasher = *KeyHasher::Create(Layout(), {});
  std::unique_ptr<EngineClient> client;
  std::optional<PicRequests> requests;
};

class PicRequestsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(daemon_.Start().ok()); }
  storage::DevicePool& pool() { return **daemon_.device_pools()->ForLayout(Layout()); }

  // 2 layers x 2 KiB per 16-token page: 8 pages.
  TestDaemon daemon_{{.device_pool_bytes = 8 * 4096}};
};

// MEPIC's reuse: the first request computes both chunks into pool pages and publishes them; a
// second request (another engine) with the same passages at other offsets shares the same pages
// in place and recomputes only its prompt and block 1 of each chunk.
TEST_F(PicRequestsTest, ChunksComputedOnceAreSharedAtAnotherOffset) {
  Engine first(daemon_.socket_path(), "first");
  const std::vector<uint32_t> a = Passage(1000, 40);  // 3 blocks padded
  const std::vector<uint32_t> b = Passage(2000, 16);  // 1 block
  const Prompt p1 = Compose(10, {a, b});
  auto r1 = first.requests->Begin(p1.tokens, p1.markers);
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_EQ(Sources(*r1), (std::vector{PicChunkSource::kWrite, PicChunkSource::kWrite}));
  EXPECT_EQ(r1->chunks[0].pages.size(), 3u);
  EXPECT_EQ(r1->chunks[1].pages.size(), 1u);
  EXPECT_EQ(r1->recomputed_tokens(kBlock), r1->prompt.padded_tokens.size())
      << "nothing was cached: the whole padded prompt is computed";
  FillPoolPages(*r1->pool, r1->chunks[0].pages, 0xa1);
  FillPoolPages(*r1->pool, r1->chunks[1].pages, 0xb2);
  ASSERT_TRUE(first.requests->Publish(*r1).ok());
  EXPECT_EQ(Sources(*r1), (std::vector{PicChunkSource::kShared, PicChunkSource::kShared}));
  EXPECT_EQ(pool().Stats().referenced_pages, 4u) << "the writer reads them until End";

  Engine second(daemon_.socket_path(), "second");
  const Prompt p2 = Compose(37, {b, a});
  auto r2 = second.requests->Begin(p2.tokens, p2.markers);
  ASSERT_TRUE(r2.ok()) << r2.status();
  ASSERT_EQ(Sources(*r2), (std::vector{PicChunkSource::kShared, PicChunkSource::kShared}));
  EXPECT_EQ(r2->chunks[0].pages, r1->chunks[1].pages) << "the same pages, not copies";
  EXPECT_EQ(r2->chunks[1].pages, r1->chunks[0].pages);
  EXPECT_TRUE(PoolPagesHold(*r2->pool, r2->chunks[0].pages, 0xb2));
  EXPECT_TRUE(PoolPagesHold(*r2->pool, r2->chunks[1].pages, 0xa1));
  uint64_t prompt_tokens = 0;
  for (const PicSegment& segment : r2->prompt.segments) {
    if (segment.kind == SegmentKind::kPrompt) prompt_tokens += segment.padded_tokens();
  }
  EXPECT_EQ(r2->recomputed_tokens(kBlock), prompt_tokens + 2 * kBlock)
      << "one block per chunk plus the prompt segments";
  EXPECT_EQ(pool().Stats().referenced_pages, 4u) << "two readers, one set of pages";

  ASSERT_TRUE(first.requests->End(*r1).ok());
  ASSERT_TRUE(second.requests->End(*r2).ok());
  ASSERT_TRUE(second.requests->End(*r2).ok()) << "End is idempotent";
  const storage::DevicePoolStats stats = pool().Stats();
  EXPECT_EQ(stats.referenced_pages, 0u);
  EXPECT_EQ(stats.committed_pages, 4u) << "they stay for the next request";
  EXPECT_TRUE(pool().CheckConsistency().ok());
}

// What the pool cannot take is computed privately, and the request goes on: admission refuses
// pages that free plus evictable ones cannot cover; a chunk another engine is writing is not
// written twice (pending, then shared once published); the same chunk twice in a prompt is
// written once.
TEST_F(PicRequestsTest, WhatThePoolCannotTakeIsPrivateOrPending) {
  Engine writer(daemon_.socket_path(), "writer");
  Engine other(daemon_.socket_path(), "other");
  const std::vector<uint32_t> big = Passage(1000, 5 * kBlock);
  const std::vector<uint32_t> also_big = Passage(3000, 4 * kBlock);
  const Prompt prompt = Compose(3, {big, also_big, big});
  auto request = writer.requests->Begin(prompt.tokens, prompt.markers);
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(Sources(*request), (std::vector{PicChunkSource::kWrite, PicChunkSource::kPrivate,
                                            PicChunkSource::kPrivate}));
  EXPECT_EQ(request->chunks[1].why_private.code(), absl::StatusCode::kResourceExhausted)
      << "5 + 4 pages in a pool of 8";
  EXPECT_EQ(request->chunks[2].why_private.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(request->recomputed_tokens(kBlock), request->prompt.padded_tokens.size());

  // While the writer computes it, another engine's request finds it pending (computed as
  // private unless refreshed); a Refresh before the writer publishes leaves it pending.
  const Prompt again = Compose(20, {big});
  auto concurrent = other.requests->Begin(again.tokens, again.markers);
  ASSERT_TRUE(concurrent.ok());
  ASSERT_EQ(Sources(*concurrent), (std::vector{PicChunkSource::kPending}));
  EXPECT_EQ(concurrent->chunks[0].why_private.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(concurrent->recomputed_tokens(kBlock), concurrent->prompt.padded_tokens.size())
      << "a pending chunk is computed unless the engine waits";
  ASSERT_TRUE(other.requests->Refresh(*concurrent).ok());
  EXPECT_EQ(Sources(*concurrent), (std::vector{PicChunkSource::kPending}));

  // Once the writer published, the waiting request shares the writer's pages.
  ASSERT_TRUE(writer.requests->Publish(*request).ok());
  ASSERT_TRUE(other.requests->Refresh(*concurrent).ok());
  ASSERT_EQ(Sources(*concurrent), (std::vector{PicChunkSource::kShared}));
  EXPECT_EQ(concurrent->chunks[0].pages, request->chunks[0].pages);
  ASSERT_TRUE(writer.requests->End(*request).ok());
  ASSERT_TRUE(other.requests->End(*concurrent).ok());
  auto later = other.requests->Begin(again.tokens, again.markers);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(Sources(*later), (std::vector{PicChunkSource::kShared}));
  ASSERT_TRUE(other.requests->End(*later).ok());
  EXPECT_EQ(pool().Stats().reserved_pages, 0u);
  EXPECT_EQ(pool().Stats().referenced_pages, 0u);
}

// A pending chunk whose writer gave up (ended its request unpublished) is the waiting request's to
// write: Refresh reserves it, and Publish commits it though the request published before.
TEST_F(PicRequestsTest, APendingChunkWhoseWriterGaveUpIsWrittenByTheWaiter) {
  Engine writer(daemon_.socket_path(), "writer");
  Engine waiter(daemon_.socket_path(), "waiter");
  const Prompt prompt = Compose(4, {Passage(1000, 32)});
  auto first = writer.requests->Begin(prompt.tokens, prompt.markers);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(Sources(*first), (std::vector{PicChunkSource::kWrite}));
  auto second = waiter.requests->Begin(prompt.tokens, prompt.markers);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(Sources(*second), (std::vector{PicChunkSource::kPending}));
  ASSERT_TRUE(waiter.requests->Publish(*second).ok()) << "nothing of its own to publish yet";

  ASSERT_TRUE(writer.requests->End(*first).ok());
  for (int waited = 0; pool().Stats().reserved_pages != 0 && waited < 2000; ++waited) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  ASSERT_TRUE(waiter.requests->Refresh(*second).ok());
  ASSERT_EQ(Sources(*second), (std::vector{PicChunkSource::kWrite}));
  ASSERT_EQ(second->chunks[0].pages.size(), 2u);
  FillPoolPages(*second->pool, second->chunks[0].pages, 0x5c);
  ASSERT_TRUE(waiter.requests->Publish(*second).ok());
  EXPECT_EQ(Sources(*second), (std::vector{PicChunkSource::kShared}));
  ASSERT_TRUE(waiter.requests->End(*second).ok());
  EXPECT_EQ(pool().Stats().committed_pages, 2u);
  EXPECT_EQ(pool().Stats().reserved_pages, 0u);
  EXPECT_TRUE(pool().CheckConsistency().ok());
}

// A chunk the pool evicted went to the host tier (T0 -> T1): a later request's acquire brings it
// back (promoted into free pages) with the bytes its writer wrote, and it is shared again.
TEST_F(PicRequestsTest, AnEvictedChunkComesBackFromTheHostTier) {
  Engine engine(daemon_.socket_path(), "engine");
  const std::vector<uint32_t> x = Passage(1000, 3 * kBlock);
  auto write = [&](const std::vector<uint32_t>& passage, uint8_t fill) {
    const Prompt prompt = Compose(4, {passage});
    auto request = engine.requests->Begin(prompt.tokens, prompt.markers);
    ASSERT_TRUE(request.ok());
    ASSERT_EQ(Sources(*request), (std::vector{PicChunkSource::kWrite}));
    FillPoolPages(*request->pool, request->chunks[0].pages, fill);
    ASSERT_TRUE(engine.requests->Publish(*request).ok());
    ASSERT_TRUE(engine.requests->End(*request).ok());
  };
  write(x, 0x3c);
  write(Passage(2000, 4 * kBlock), 0x4d);
  write(Passage(3000, 3 * kBlock), 0x5e);  // 3 + 4 + 3 pages of 8: x is evicted
  EXPECT_EQ(pool().Lookup(std::vector<ChunkKey>{engine.hasher.PicKey(x, 0)}), 0u);

  const Prompt again = Compose(30, {x});
  auto request = engine.requests->Begin(again.tokens, again.markers);
  ASSERT_TRUE(request.ok());
  ASSERT_EQ(Sources(*request), (std::vector{PicChunkSource::kShared}))
      << request->chunks[0].why_private;
  EXPECT_TRUE(PoolPagesHold(*request->pool, request->chunks[0].pages, 0x3c));
  EXPECT_EQ(request->recomputed_tokens(kBlock), request->prompt.padded_tokens.size() - 2 * kBlock)
      << "recomputed as a shared chunk: its first block only";
  ASSERT_TRUE(engine.requests->End(*request).ok());
  EXPECT_TRUE(pool().CheckConsistency().ok());
}

// Chunks are shared within a tenant, never across tenants (their keys are salted apart).
TEST_F(PicRequestsTest, TenantsDoNotShareChunks) {
  Engine engine(daemon_.socket_path(), "engine");
  const Prompt prompt = Compose(4, {Passage(1000, 32)});
  auto first = engine.requests->Begin(prompt.tokens, prompt.markers, "tenant-a");
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(Sources(*first), (std::vector{PicChunkSource::kWrite}));
  ASSERT_TRUE(engine.requests->Publish(*first).ok());
  ASSERT_TRUE(engine.requests->End(*first).ok());

  auto same_tenant = engine.requests->Begin(prompt.tokens, prompt.markers, "tenant-a");
  auto other_tenant = engine.requests->Begin(prompt.tokens, prompt.markers, "tenant-b");
  auto no_tenant = engine.requests->Begin(prompt.tokens, prompt.markers);
  ASSERT_TRUE(same_tenant.ok() && other_tenant.ok() && no_tenant.ok());
  EXPECT_EQ(Sources(*same_tenant), (std::vector{PicChunkSource::kShared}));
  EXPECT_EQ(Sources(*other_tenant), (std::vector{PicChunkSource::kWrite}));
  EXPECT_EQ(Sources(*no_tenant), (std::vector{PicChunkSource::kWrite}));
  for (auto* request : {&*same_tenant, &*other_tenant, &*no_tenant}) {
    ASSERT_TRUE(engine.requests->End(*request).ok());
  }
}

// A request that ends without publishing gives its reserved pages back.
TEST_F(PicRequestsTest, AnUnpublishedRequestAbortsItsReservations) {
  Engine engine(daemon_.socket_path(), "engine");
  const Prompt prompt = Compose(4, {Passage(1000, 30)});
  auto request = engine.requests->Begin(prompt.tokens, prompt.markers);
  ASSERT_TRUE(request.ok());
  ASSERT_EQ(Sources(*request), (std::vector{PicChunkSource::kWrite}));
  EXPECT_EQ(pool().Stats().reserved_pages, 2u);
  ASSERT_TRUE(engine.requests->End(*request).ok());
  EXPECT_EQ(pool().Stats().reserved_pages, 0u);
  EXPECT_EQ(pool().Stats().chunks, 0u);
}

// Bad markers are the caller's to fall back on (prefix caching), before anything is sent.
TEST_F(PicRequestsTest, BadMarkersAreRefusedBeforeAnythingIsSent) {
  Engine engine(daemon_.socket_path(), "engine");
  const std::vector<uint32_t> tokens = Passage(0, 64);
  const std::vector<SegmentMarker> overlapping{{0, 20}, {10, 30}};
  const std::vector<SegmentMarker> out_of_range{{40, 80}};
  const std::vector<SegmentMarker> empty{{5, 5}};
  for (const auto* markers : {&overlapping, &out_of_range, &empty}) {
    auto request = engine.requests->Begin(tokens, *markers);
    EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(engine.client->stats().requests, 0u);

  auto plain = engine.requests->Begin(tokens, {});
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->chunks.empty());
  EXPECT_EQ(plain->recomputed_tokens(kBlock), 64u);
  EXPECT_EQ(engine.client->stats().requests, 0u) << "no chunk, no pool call";
}

// Without a usable pool every chunk is private, with the reason, and nothing is held.
TEST_F(PicRequestsTest, WithoutAUsablePoolEveryChunkIsPrivate) {
  const Prompt prompt = Compose(4, {Passage(1000, 32), Passage(2000, 16)});

  TestDaemon plain;
  ASSERT_TRUE(plain.Start().ok());
  Engine no_pool(plain.socket_path(), "no-pool");
  auto request = no_pool.requests->Begin(prompt.tokens, prompt.markers);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(Sources(*request), (std::vector{PicChunkSource::kPrivate, PicChunkSource::kPrivate}));
  EXPECT_EQ(request->chunks[0].why_private.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(no_pool.requests->End(*request).ok());

  // A pool of 16-token pages for a request split in 32-token blocks: nothing is usable, and
  // what was acquired is given back.
  Engine writer(daemon_.socket_path(), "writer");
  const Prompt small = Compose(4, {Passage(1000, 32)});
  auto written = writer.requests->Begin(small.tokens, small.markers);
  ASSERT_TRUE(written.ok());
  ASSERT_TRUE(writer.requests->Publish(*written).ok());
  ASSERT_TRUE(writer.requests->End(*written).ok());
  Engine mismatched(daemon_.socket_path(), "mismatched", /*block_tokens=*/32);
  auto refused = mismatched.requests->Begin(small.tokens, small.markers);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(Sources(*refused), (std::vector{PicChunkSource::kPrivate}));
  EXPECT_EQ(refused->chunks[0].why_private.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool().Stats().references, 0u);
}

// A session that drops mid-request takes its handles with it: the daemon frees the pages, End
// succeeds without sending anything for them, and the next request works on a new session.
TEST_F(PicRequestsTest, ADroppedSessionEndsCleanly) {
  Engine engine(daemon_.socket_path(), "engine");
  const Prompt prompt = Compose(4, {Passage(1000, 32)});
  auto request = engine.requests->Begin(prompt.tokens, prompt.markers);
  ASSERT_TRUE(request.ok());
  ASSERT_EQ(Sources(*request), (std::vector{PicChunkSource::kWrite}));
  engine.client->Disconnect();
  EXPECT_EQ(engine.requests->Publish(*request).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Sources(*request), (std::vector{PicChunkSource::kPrivate}));
  EXPECT_TRUE(engine.requests->End(*request).ok());
  for (int waited = 0; pool().Stats().reserved_pages != 0 && waited < 2000; ++waited) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(pool().Stats().reserved_pages, 0u);

  auto next = engine.requests->Begin(prompt.tokens, prompt.markers);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(Sources(*next), (std::vector{PicChunkSource::kWrite}));
  EXPECT_GT(next->generation, request->generation);
  ASSERT_TRUE(engine.requests->End(*next).ok());
}

// The recompute policy chosen per request: what of a shared chunk each recomputes, and
// LegoLink-0's compile variant keeping its chunks apart from the chunks compiled alone.
TEST_F(PicRequestsTest, EachPolicyRecomputesItsShareOfTheSharedChunks) {
  Engine engine(daemon_.socket_path(), "policies");
  const std::vector<uint32_t> a = Passage(1000, 40);  // 8 pads + 40 tokens: 3 blocks
  const Prompt p = Compose(10, {a});                  // [10 + 6 pads][48][5]
  auto written = engine.requests->Begin(p.tokens, p.markers);
  ASSERT_TRUE(written.ok()) << written.status();
  ASSERT_TRUE(engine.requests->Publish(*written).ok());
  ASSERT_TRUE(engine.requests->End(*written).ok());

  const uint32_t chunk_begin = 16, chunk_end = 64, total = 69;
  struct Case {
    PicPolicy policy;
    std::vector<PicTokenRange> from_layer_zero;
    uint64_t recomputed;
  };
  const std::vector<Case> cases = {
      {{}, {{0, chunk_begin + kBlock}, {chunk_end, total}}, 16 + 16 + 5},
      // LegoLink-4 counts real tokens: the chunk's 8 leading pads, then 4 of its tokens.
      {{.recompute = PicRecompute::kLegoLink, .legolink_tokens = 4},
       {{0, chunk_begin + 8 + 4}, {chunk_end, total}},
       16 + 12 + 5},
      {{.recompute = PicRecompute::kLegoLink, .legolink_tokens = 40},
       {{0, total}},
       total},  // k = the chunk's real tokens: all of it
      {{.recompute = PicRecompute::kLegoLink, .legolink_tokens = 100},
       {{0, total}},
       total},  // k past the chunk: all of it
      {{.recompute = PicRecompute::kLegoLink, .legolink_tokens = UINT32_MAX},
       {{0, total}},
       total},  // k that would wrap past the chunk's begin
      {{.recompute = PicRecompute::kCacheBlend, .check_layer = 1, .blend_ratio = 0.5},
       {{0, chunk_begin}, {chunk_end, total}},
       16 + 24 + 5},
  };
  for (const Case& c : cases) {
    auto request = engine.requests->Begin(p.tokens, p.markers, {}, c.policy);
    ASSERT_TRUE(request.ok()) << request.status();
    ASSERT_EQ(Sources(*request), std::vector{PicChunkSource::kShared});
    EXPECT_EQ(request->recomputed_from_layer_zero(kBlock), c.from_layer_zero);
    EXPECT_EQ(request->recomputed_tokens(kBlock), c.recomputed);
    ASSERT_TRUE(engine.requests->End(*request).ok());
  }

  // LegoLink-0: the chunk compiled after 3 dummies is another chunk; first written, then shared
  // with nothing recomputed.
  const PicPolicy zero{.recompute = PicRecompute::kLegoLinkZero};
  auto compiled = engine.requests->Begin(p.tokens, p.markers, {}, zero);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(Sources(*compiled), std::vector{PicChunkSource::kWrite});
  EXPECT_NE(compiled->prompt.segments[1].key, written->prompt.segments[1].key);
  ASSERT_TRUE(engine.requests->Publish(*compiled).ok());
  ASSERT_TRUE(engine.requests->End(*compiled).ok());
  auto linked = engine.requests->Begin(p.tokens, p.markers, {}, zero);
  ASSERT_TRUE(linked.ok()) << linked.status();
  ASSERT_EQ(Sources(*linked), std::vector{PicChunkSource::kShared});
  EXPECT_EQ(linked->recomputed_from_layer_zero(kBlock),
            (std::vector<PicTokenRange>{{0, chunk_begin}, {chunk_end, total}}));
  EXPECT_EQ(linked->recomputed_tokens(kBlock), 16u + 5u);
  ASSERT_TRUE(engine.requests->End(*linked).ok());

  // Bad policies are refused before anything is sent.
  for (const PicPolicy& bad :
       {PicPolicy{.recompute = PicRecompute::kLegoLink, .legolink_tokens = 0},
        PicPolicy{.recompute = PicRecompute::kCacheBlend, .check_layer = 2},
        PicPolicy{.recompute = PicRecompute::kCacheBlend, .blend_ratio = 1.5}}) {
    EXPECT_EQ(engine.requests->Begin(p.tokens, p.markers, {}, bad).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(pool().Stats().references, 0u);
}

// A thinned chunk (its kept blocks at their positions) is read in place unless a kept block lies
// past its segment, the policy recomputes part of a dropped block (LegoLink-k with k inside a
// block), or the policy is CacheBlend (which runs every token of a shared chunk).
TEST(ThinnedChunkReadableTest, OnlyWhatThePolicyCanReadWithoutTheDroppedBlocks) {
  const std::vector<uint32_t> kept = {0, 48};  // of a 64-token chunk: blocks 0 and 3
  auto readable = [&](const PicPolicy& policy, uint32_t padded_tokens = 64,
                      uint32_t pad_tokens = 0) {
    return ThinnedChunkReadable(policy, kept, padded_tokens, pad_tokens, kBlock);
  };
  EXPECT_TRUE(readable({}).ok()) << "MEPIC recomputes block 1 whole";
  EXPECT_TRUE(readable({.recompute = PicRecompute::kLegoLinkZero}).ok());
  EXPECT_TRUE(readable({.recompute = PicRecompute::kLegoLink, .legolink_tokens = 4}).ok())
      << "block 0 is kept: filled from its page";
  EXPECT_TRUE(readable({.recompute = PicRecompute::kLegoLink, .legolink_tokens = 32}).ok())
      << "blocks 0 and 1 recomputed whole";
  EXPECT_TRUE(readable({.recompute = PicRecompute::kLegoLink, .legolink_tokens = 100}).ok())
      << "the whole chunk recomputed";
  const absl::Status partial =
      readable({.recompute = PicRecompute::kLegoLink, .legolink_tokens = 20});
  EXPECT_EQ(partial.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(partial.message().find("block at 16"), std::string_view::npos) << partial;
  // With 8 leading pads, LegoLink-k recomputes 8 + k tokens.
  EXPECT_TRUE(readable({.recompute = PicRecompute::kLegoLink, .legolink_tokens = 24}, 64, 8).ok())
      << "pads and 24 tokens: blocks 0 and 1 whole";
  const absl::Status padded =
      readable({.recompute = PicRecompute::kLegoLink, .legolink_tokens = 16}, 64, 8);
  EXPECT_EQ(padded.code(), absl::StatusCode::kFailedPrecondition)
      << "pads and 16 tokens end inside the dropped block at 16";
  EXPECT_EQ(readable({.recompute = PicRecompute::kCacheBlend}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(readable({}, /*padded_tokens=*/48).code(), absl::StatusCode::kFailedPrecondition)
      << "a kept block past the segment";
}

}  // namespace
}  // namespace strata::connector::internal
