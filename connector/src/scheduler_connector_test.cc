#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <numeric>
#include <thread>

#include "connector/src/testing/test_daemon.h"
#include "core/scoped_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "strata/connector.h"
#include "tests/support/test_layout.h"

namespace strata::connector {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using testing::TestDaemon;

constexpr uint32_t kChunk = 16;
constexpr uint32_t kBlock = 4;

KvLayout TestLayout() {
  return test_support::SmallLayout({.model_id = "sched-test",
                                    .head_dim = 8,
                                    .dtype = KvDtype::kBfloat16,
                                    .chunk_tokens = kChunk});
}

ConnectorOptions Options(const std::string& socket_path) {
  ConnectorOptions options;
  options.socket_path = socket_path;
  options.layout = TestLayout();
  options.block_size = kBlock;
  options.lookup_budget = milliseconds(500);  // generous: sanitizer builds are slow
  return options;
}

std::vector<uint32_t> Prompt(size_t len, uint32_t first = 1000) {
  std::vector<uint32_t> tokens(len);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// Commits the first `num_chunks` chunks of `tokens` (their keys, placeholder bytes) to the tier.
void Populate(storage::HostTier& tier, const std::vector<uint32_t>& tokens, size_t num_chunks,
              PartialChunk partial = PartialChunk::kExclude, std::string_view salt = "") {
  const KeyHasher hasher = *KeyHasher::Create(TestLayout(), {});
  const std::vector<ChunkKey> keys = hasher.PrefixKeys(tokens, {salt, ""}, partial);
  ASSERT_LE(num_chunks, keys.size());
  for (size_t i = 0; i < num_chunks; ++i) {
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(kChunk, tokens.size() - i * kChunk));
    auto reserved = tier.Reserve(TestLayout(), keys[i], {.num_tokens = n});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    if (reserved->outcome == storage::ReserveOutcome::kAlreadyPresent) continue;
    ASSERT_EQ(reserved->outcome, storage::ReserveOutcome::kReserved);
    ASSERT_TRUE(tier.Commit(std::move(reserved->reservation)).ok());
  }
}

std::vector<int32_t> Blocks(size_t n, int32_t first = 100) {
  std::vector<int32_t> ids(n);
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

class SchedulerConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(daemon_.Start().ok());
    scheduler_ = *SchedulerConnector::Create(Options(daemon_.socket_path()));
  }

  int64_t Match(const std::vector<uint32_t>& prompt, int64_t computed, std::string id = "r") {
    const MatchResult result =
        scheduler_->GetNumNewMatchedTokens({.request_id = id, .prompt_tokens = prompt}, computed);
    EXPECT_FALSE(result.load_async);
    return result.num_tokens;
  }

  TestDaemon daemon_;
  std::unique_ptr<SchedulerConnector> scheduler_;
};

// The rule: hit = leading cached whole chunks (from the first chunk not wholly computed);
// usable = min(hit, prompt_len - 1); result = max(0, usable - num_computed_tokens).
TEST_F(SchedulerConnectorTest, MatchedTokensFollowTheDocumentedRule) {
  const auto prompt = Prompt(70);  // 4 full chunks + 6 tokens
  EXPECT_EQ(Match(prompt, 0), 0) << "nothing cached";
  Populate(*daemon_.tier(), prompt, 2);
  EXPECT_EQ(Match(prompt, 0), 32) << "two chunks";
  EXPECT_EQ(Match(prompt, 16), 16) << "the engine has the first chunk";
  EXPECT_EQ(Match(prompt, 8), 24) << "a load may start inside a chunk";
  EXPECT_EQ(Match(prompt, 32), 0) << "the engine has all that is cached";
  EXPECT_EQ(Match(prompt, 40), 0);
  Populate(*daemon_.tier(), prompt, 4);
  EXPECT_EQ(Match(prompt, 0), 64) << "the partial tail is not stored by default";

  // A prompt that is exactly whole chunks, all cached: one token is left to compute.
  const auto exact = Prompt(64, 5000);
  Populate(*daemon_.tier(), exact, 4);
  EXPECT_EQ(Match(exact, 0), 63);
  EXPECT_EQ(Match(exact, 48), 15);
  EXPECT_EQ(Match(exact, 63), 0);

  // Shorter than a chunk: never a hit.
  EXPECT_EQ(Match(Prompt(15, 9000), 0), 0);

  // A prompt sharing the first two chunks, then diverging: hits stop at the divergence.
  auto diverging = prompt;
  diverging[40] = 1;
  EXPECT_EQ(Match(diverging, 0), 32);
}

TEST_F(SchedulerConnectorTest, LookupsSkipChunksTheEngineHas) {
  const auto prompt = Prompt(64);
  // Only chunks 2 and 3 are cached; chunk 0 and 1 are not, but the engine computed them.
  const KeyHasher hasher = *KeyHasher::Create(TestLayout(), {});
  const auto keys = hasher.PrefixKeys(prompt, {});
  for (size_t i : {2, 3}) {
    auto reserved = daemon_.tier()->Reserve(TestLayout(), keys[i], {.num_tokens = kChunk});
    ASSERT_TRUE(daemon_.tier()->Commit(std::move(reserved->reservation)).ok());
  }
  EXPECT_EQ(Match(prompt, 0), 0) << "chunk 0 is missing: hits are a prefix";
  EXPECT_EQ(Match(prompt, 32), 31) << "from chunk 2 on, everything but the last token";
}

TEST_F(SchedulerConnectorTest, PartialChunksCountWhenStored) {
  ConnectorOptions options = Options(daemon_.socket_path());
  options.store_partial_chunks = true;
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(70);
  Populate(*daemon_.tier(), prompt, 5, PartialChunk::kInclude);
  EXPECT_EQ(
      scheduler->GetNumNewMatchedTokens({.request_id = "p", .prompt_tokens = prompt}, 0).num_tokens,
      69);
  ASSERT_TRUE(scheduler->UpdateStateAfterAlloc("p", Blocks(18), 69).ok());
  const ConnectorMetadata meta = scheduler->BuildConnectorMeta({});
  ASSERT_EQ(meta.loads.size(), 1u);
  EXPECT_EQ(meta.loads[0].token_begin, 0);
  EXPECT_EQ(meta.loads[0].token_end, 69);
  EXPECT_EQ(meta.loads[0].tokens.size(), 70u) << "the partial chunk's key covers its real tokens";
}

// Opaque blocks (whole_blocks_only): the partial last chunk is never a hit, even when stored
// and asked for, and chunks that do not cover whole blocks are refused up front.
TEST_F(SchedulerConnectorTest, OpaqueBlocksTakeWholeChunksOnly) {
  ConnectorOptions options = Options(daemon_.socket_path());
  options.store_partial_chunks = true;
  options.whole_blocks_only = true;
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(70);
  Populate(*daemon_.tier(), prompt, 5, PartialChunk::kInclude);
  EXPECT_EQ(
      scheduler->GetNumNewMatchedTokens({.request_id = "p", .prompt_tokens = prompt}, 0).num_tokens,
      64);
  // A prompt of whole chunks: the hit stops one block short of its end, not one token.
  const auto exact = Prompt(64, 5000);
  Populate(*daemon_.tier(), exact, 4);
  EXPECT_EQ(
      scheduler->GetNumNewMatchedTokens({.request_id = "x", .prompt_tokens = exact}, 0).num_tokens,
      64 - kBlock);
  options.block_size = 3 * kChunk / 2;
  EXPECT_EQ(SchedulerConnector::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerConnectorTest, TenantSaltSeparatesCaches) {
  const auto prompt = Prompt(48);
  Populate(*daemon_.tier(), prompt, 3, PartialChunk::kExclude, "tenant-a");
  auto match = [&](std::string_view salt) {
    return scheduler_
        ->GetNumNewMatchedTokens({.request_id = "t", .prompt_tokens = prompt, .tenant_salt = salt},
                                 0)
        .num_tokens;
  };
  EXPECT_EQ(match("tenant-a"), 47);
  EXPECT_EQ(match("tenant-b"), 0);
  EXPECT_EQ(match(""), 0);

  // The daemon counts each lookup under its tenant, with the tokens the chain covers.
  const auto tenants = daemon_.lookups().ByTenant(daemon::LookupSource::kEngine);
  ASSERT_EQ(tenants.size(), 3u);
  EXPECT_EQ(tenants[0].first, "");
  EXPECT_EQ(tenants[1].first, "tenant-a");
  EXPECT_EQ(tenants[1].second.hit_tokens_total(), 48u);
  EXPECT_EQ(tenants[1].second.miss_tokens, 0u);
  EXPECT_EQ(tenants[2].first, "tenant-b");
  EXPECT_EQ(tenants[2].second.miss_tokens, 48u);
}

// A partial last chunk counts by its tokens, not as a whole chunk.
TEST_F(SchedulerConnectorTest, LookupsCountTheTokensOfAPartialLastChunk) {
  ConnectorOptions options = Options(daemon_.socket_path());
  options.store_partial_chunks = true;
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(70);  // 4 chunks of 16 and 6 tokens
  Populate(*daemon_.tier(), prompt, 2);
  scheduler->GetNumNewMatchedTokens({.request_id = "p", .prompt_tokens = prompt}, 0);
  const daemon::LookupTally engines = daemon_.lookups().Total(daemon::LookupSource::kEngine);
  EXPECT_EQ(engines.lookups, 1u);
  EXPECT_EQ(engines.hit_tokens_total(), 32u);
  EXPECT_EQ(engines.miss_tokens, 38u);
}

TEST_F(SchedulerConnectorTest, PlansTheLoadIntoTheAllocatedBlocks) {
  const auto prompt = Prompt(70);
  Populate(*daemon_.tier(), prompt, 3);
  ASSERT_EQ(Match(prompt, 8, "req"), 40);
  const auto blocks = Blocks(18);
  ASSERT_TRUE(scheduler_->UpdateStateAfterAlloc("req", blocks, 40).ok());
  ScheduledRequest scheduled{.request_id = "req",
                             .kind = ScheduledKind::kNew,
                             .num_computed_tokens = 48,
                             .num_scheduled_tokens = 22,
                             .block_ids = blocks};
  const ConnectorMetadata meta = scheduler_->BuildConnectorMeta({.requests = {scheduled}});
  EXPECT_EQ(meta.block_size, kBlock);
  EXPECT_EQ(meta.chunk_tokens, kChunk);
  ASSERT_EQ(meta.loads.size(), 1u);
  const TransferSpec& load = meta.loads[0];
  EXPECT_EQ(load.request_id, "req");
  EXPECT_EQ(load.token_begin, 8);
  EXPECT_EQ(load.token_end, 48);
  EXPECT_FALSE(load.fail);
  EXPECT_EQ(load.tokens, std::vector<uint32_t>(prompt.begin(), prompt.begin() + 48));
  EXPECT_EQ(load.block_ids, std::vector<int32_t>(blocks.begin(), blocks.begin() + 12));
  // The step computes the rest of the prompt: chunk 3 (the first not cached) is saved; the
  // partial tail is not.
  ASSERT_EQ(meta.saves.size(), 1u);
  EXPECT_EQ(meta.saves[0].token_begin, 48);
  EXPECT_EQ(meta.saves[0].token_end, 64);
  EXPECT_EQ(meta.saves[0].tokens.size(), 64u);
  EXPECT_EQ(meta.saves[0].block_ids.size(), 16u);
  // The load is planned once.
  EXPECT_TRUE(scheduler_->BuildConnectorMeta({}).loads.empty());
}

TEST_F(SchedulerConnectorTest, SavesFollowChunkedPrefillAndBlockChanges) {
  const auto prompt = Prompt(70);
  ASSERT_EQ(Match(prompt, 0, "c"), 0);
  ASSERT_TRUE(scheduler_->UpdateStateAfterAlloc("c", Blocks(5), 0).ok());
  // Step 1: 20 tokens, 5 blocks: chunk 0 complete.
  auto meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "c",
                                                            .kind = ScheduledKind::kNew,
                                                            .num_computed_tokens = 0,
                                                            .num_scheduled_tokens = 20,
                                                            .block_ids = Blocks(5)}}});
  EXPECT_TRUE(meta.loads.empty());
  ASSERT_EQ(meta.saves.size(), 1u);
  EXPECT_EQ(meta.saves[0].token_begin, 0);
  EXPECT_EQ(meta.saves[0].token_end, 16);
  // Step 2: 10 more tokens (30): nothing completes.
  meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "c",
                                                       .kind = ScheduledKind::kRunning,
                                                       .num_computed_tokens = 20,
                                                       .num_scheduled_tokens = 10,
                                                       .block_ids = Blocks(3, 105)}}});
  EXPECT_TRUE(meta.saves.empty());
  // Step 3: 40 more (70, the whole prompt): chunks 1..3, with the appended blocks.
  meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "c",
                                                       .kind = ScheduledKind::kRunning,
                                                       .num_computed_tokens = 30,
                                                       .num_scheduled_tokens = 40,
                                                       .block_ids = Blocks(10, 108)}}});
  ASSERT_EQ(meta.saves.size(), 1u);
  EXPECT_EQ(meta.saves[0].token_begin, 16);
  EXPECT_EQ(meta.saves[0].token_end, 64);
  EXPECT_EQ(meta.saves[0].block_ids, Blocks(16));
  // Decode steps save nothing more.
  meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "c",
                                                       .kind = ScheduledKind::kRunning,
                                                       .num_computed_tokens = 70,
                                                       .num_scheduled_tokens = 1}}});
  EXPECT_TRUE(meta.saves.empty());
  // Preempted and resumed with new blocks: what was saved stays saved.
  meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "c",
                                                       .kind = ScheduledKind::kResumed,
                                                       .num_computed_tokens = 0,
                                                       .num_scheduled_tokens = 71,
                                                       .block_ids = Blocks(18, 500)}}});
  EXPECT_TRUE(meta.saves.empty());
  // Finished: forgotten.
  EXPECT_FALSE(scheduler_->RequestFinished("c", Blocks(18, 500)));
  meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "c",
                                                       .kind = ScheduledKind::kRunning,
                                                       .num_computed_tokens = 71,
                                                       .num_scheduled_tokens = 1}}});
  EXPECT_TRUE(meta.saves.empty());
}

// A sliding-window KV-cache group: blocks that fell out of the window are the null block.
TEST(SchedulerConnectorNullBlockTest, NullBlocksAreNeitherSavedNorLoaded) {
  TestDaemon daemon;
  ASSERT_TRUE(daemon.Start().ok());
  ConnectorOptions options = Options(daemon.socket_path());
  options.null_block_id = 0;
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(70);

  // Chunked prefill: step 1 computes 20 tokens; by step 2 the window has freed blocks 0..2
  // (positions 0..11), which chunk 0 spans (saved in step 1, before) and chunk 1 does not.
  ASSERT_EQ(
      scheduler->GetNumNewMatchedTokens({.request_id = "w", .prompt_tokens = prompt}, 0).num_tokens,
      0);
  auto meta = scheduler->BuildConnectorMeta({.requests = {{.request_id = "w",
                                                           .kind = ScheduledKind::kNew,
                                                           .num_computed_tokens = 0,
                                                           .num_scheduled_tokens = 20,
                                                           .block_ids = Blocks(5)}}});
  ASSERT_EQ(meta.saves.size(), 1u);
  EXPECT_EQ(meta.saves[0].token_begin, 0);
  // Step 2 gets every block again (a resumed request), the first five of them null: chunk 1
  // (positions 16..31) spans block 4, which is null, so only chunks 2 and 3 are saved.
  std::vector<int32_t> windowed = Blocks(18);
  std::fill(windowed.begin(), windowed.begin() + 5, 0);
  meta = scheduler->BuildConnectorMeta({.requests = {{.request_id = "w",
                                                      .kind = ScheduledKind::kResumed,
                                                      .num_computed_tokens = 20,
                                                      .num_scheduled_tokens = 50,
                                                      .block_ids = windowed}}});
  ASSERT_EQ(meta.saves.size(), 1u);
  EXPECT_EQ(meta.saves[0].token_begin, 32);
  EXPECT_EQ(meta.saves[0].token_end, 64);

  // A load into a window that freed its first blocks copies from the first live block on.
  Populate(*daemon.tier(), prompt, 4);
  ASSERT_EQ(
      scheduler->GetNumNewMatchedTokens({.request_id = "l", .prompt_tokens = prompt}, 0).num_tokens,
      64);
  std::vector<int32_t> loaded = Blocks(18);
  std::fill(loaded.begin(), loaded.begin() + 6, 0);
  ASSERT_TRUE(scheduler->UpdateStateAfterAlloc("l", loaded, 64).ok());
  meta = scheduler->BuildConnectorMeta({});
  ASSERT_EQ(meta.loads.size(), 1u);
  EXPECT_EQ(meta.loads[0].token_begin, 24);
  EXPECT_EQ(meta.loads[0].token_end, 64);
  EXPECT_FALSE(meta.loads[0].fail);

  // Without null_block_id, block 0 is a block like any other.
  auto plain = *SchedulerConnector::Create(Options(daemon.socket_path()));
  ASSERT_EQ(
      plain->GetNumNewMatchedTokens({.request_id = "p", .prompt_tokens = prompt}, 0).num_tokens,
      64);
  ASSERT_TRUE(plain->UpdateStateAfterAlloc("p", loaded, 64).ok());
  meta = plain->BuildConnectorMeta({});
  ASSERT_EQ(meta.loads.size(), 1u);
  EXPECT_EQ(meta.loads[0].token_begin, 0);
}

// vLLM's num_publishable_block_hashes: positions past the fence are saved once it lifts.
TEST_F(SchedulerConnectorTest, SavesWaitForTheSaveLimit) {
  const auto prompt = Prompt(70);
  ASSERT_EQ(Match(prompt, 0, "f"), 0);
  auto meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "f",
                                                            .kind = ScheduledKind::kNew,
                                                            .num_computed_tokens = 0,
                                                            .num_scheduled_tokens = 70,
                                                            .block_ids = Blocks(18),
                                                            .save_limit_tokens = 20}}});
  ASSERT_EQ(meta.saves.size(), 1u);
  EXPECT_EQ(meta.saves[0].token_end, 16);
  meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "f",
                                                       .kind = ScheduledKind::kRunning,
                                                       .num_computed_tokens = 70,
                                                       .num_scheduled_tokens = 1,
                                                       .save_limit_tokens = 0}}});
  EXPECT_TRUE(meta.saves.empty()) << "a fence never goes back over what was saved";
  meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "f",
                                                       .kind = ScheduledKind::kRunning,
                                                       .num_computed_tokens = 71,
                                                       .num_scheduled_tokens = 1,
                                                       .save_limit_tokens = 68}}});
  ASSERT_EQ(meta.saves.size(), 1u);
  EXPECT_EQ(meta.saves[0].token_begin, 16);
  EXPECT_EQ(meta.saves[0].token_end, 64);
}

TEST_F(SchedulerConnectorTest, SkipsChunksTheLookupFoundAndKnowsNewRequestsFromTheStep) {
  const auto prompt = Prompt(64);
  Populate(*daemon_.tier(), prompt, 2);
  ASSERT_EQ(Match(prompt, 0, "k"), 32);
  ASSERT_TRUE(scheduler_->UpdateStateAfterAlloc("k", Blocks(16), 32).ok());
  auto meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "k",
                                                            .kind = ScheduledKind::kNew,
                                                            .num_computed_tokens = 32,
                                                            .num_scheduled_tokens = 32,
                                                            .block_ids = Blocks(16)}},
                                              .finished_request_ids = {"gone"}});
  ASSERT_EQ(meta.saves.size(), 1u);
  EXPECT_EQ(meta.saves[0].token_begin, 32) << "chunks 0 and 1 are cached already";
  EXPECT_EQ(meta.saves[0].token_end, 64);
  EXPECT_THAT(meta.finished_request_ids, ElementsAre("gone"));

  // A request the scheduler never looked up, with its prompt in the step.
  meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "unseen",
                                                       .kind = ScheduledKind::kNew,
                                                       .num_computed_tokens = 0,
                                                       .num_scheduled_tokens = 40,
                                                       .block_ids = Blocks(10),
                                                       .prompt_tokens = Prompt(40, 7)}}});
  ASSERT_EQ(meta.saves.size(), 1u);
  EXPECT_EQ(meta.saves[0].request_id, "unseen");
  EXPECT_EQ(meta.saves[0].token_end, 32);
  // Without its prompt, nothing can be saved.
  meta = scheduler_->BuildConnectorMeta({.requests = {{.request_id = "nameless",
                                                       .kind = ScheduledKind::kNew,
                                                       .num_computed_tokens = 0,
                                                       .num_scheduled_tokens = 40,
                                                       .block_ids = Blocks(10)}}});
  EXPECT_TRUE(meta.saves.empty());
}

TEST_F(SchedulerConnectorTest, LoadsNobodyOfferedAreFailedNotDropped) {
  const auto prompt = Prompt(64);
  Populate(*daemon_.tier(), prompt, 2);
  ASSERT_EQ(Match(prompt, 0, "m"), 32);
  // More than offered.
  EXPECT_EQ(scheduler_->UpdateStateAfterAlloc("m", Blocks(16), 40).code(),
            absl::StatusCode::kInvalidArgument);
  // A request never looked up.
  EXPECT_EQ(scheduler_->UpdateStateAfterAlloc("ghost", Blocks(4), 16).code(),
            absl::StatusCode::kFailedPrecondition);
  // Too few blocks for the load.
  ASSERT_EQ(Match(prompt, 0, "n"), 32);
  EXPECT_EQ(scheduler_->UpdateStateAfterAlloc("n", Blocks(3), 32).code(),
            absl::StatusCode::kInvalidArgument);
  const ConnectorMetadata meta = scheduler_->BuildConnectorMeta({});
  ASSERT_EQ(meta.loads.size(), 3u);
  for (const TransferSpec& load : meta.loads) EXPECT_TRUE(load.fail) << load.request_id;
  EXPECT_EQ(meta.loads[0].request_id, "ghost");
  EXPECT_EQ(meta.loads[0].token_end, 16);
  EXPECT_EQ(meta.loads[1].request_id, "m");
  EXPECT_EQ(meta.loads[1].token_end, 40);
  EXPECT_EQ(meta.loads[2].request_id, "n");
  EXPECT_EQ(meta.loads[2].token_end, 12) << "clipped to the blocks given";

  // 0 external tokens cancels an offered load.
  ASSERT_EQ(Match(prompt, 0, "z"), 32);
  EXPECT_TRUE(scheduler_->UpdateStateAfterAlloc("z", Blocks(16), 0).ok());
  EXPECT_TRUE(scheduler_->BuildConnectorMeta({}).loads.empty());
}

TEST_F(SchedulerConnectorTest, DisabledLoadsNeverLookUp) {
  ConnectorOptions options = Options(daemon_.socket_path());
  options.enable_load = false;
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(64);
  Populate(*daemon_.tier(), prompt, 4);
  EXPECT_EQ(
      scheduler->GetNumNewMatchedTokens({.request_id = "x", .prompt_tokens = prompt}, 0).num_tokens,
      0);
  EXPECT_EQ(scheduler->Stats().lookups, 0u);
}

// Prefetch through the real session server over a disk tier: the daemon promotes the prompt's
// disk-only chunks in the background, so the lookup and load that follow read no disk.
TEST(SchedulerConnectorDiskTest, PrefetchBringsDiskChunksIntoTheHostTierInTheBackground) {
  // The default (adaptive) policy: the prompt's chunks, stored first, leave probation first for
  // disk. Promoting them evicts the other prompt's, never one promoted before (the promoter
  // soft-pins them, and ghost hits alone would let main give up the first promoted chunk).
  TestDaemon daemon({.capacity_bytes = 4 * 4096,
                     .disk_capacity_bytes = 4ull << 20,
                     .disk_segment_bytes = 1ull << 20});
  ASSERT_TRUE(daemon.Start().ok());
  auto scheduler = *SchedulerConnector::Create(Options(daemon.socket_path()));
  const auto prompt = Prompt(3 * kChunk + 5);
  Populate(*daemon.tier(), prompt, 3);
  Populate(*daemon.tier(), Prompt(4 * kChunk, 50000), 4);  // pushes the prompt's chunks to disk
  const std::vector<ChunkKey> keys =
      KeyHasher::Create(TestLayout(), {})->PrefixKeys(prompt, {}, PartialChunk::kExclude);
  ASSERT_EQ(keys.size(), 3u);
  for (const ChunkKey& key : keys) {
    ASSERT_FALSE(daemon.tier()->Contains(key));
    ASSERT_TRUE((daemon.store()->LocatePrefix({&key, 1}) == std::vector{storage::Tier::kDisk}));
  }
  const uint64_t reads = daemon.store()->Stats().lower.at(0).reads;

  EXPECT_EQ(scheduler->Prefetch({.request_id = "q", .prompt_tokens = prompt}), 3u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto all_in_host = [&] {
    for (const ChunkKey& key : keys) {
      if (!daemon.tier()->Contains(key)) return false;
    }
    return true;
  };
  while (!all_in_host() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(2));
  }
  ASSERT_TRUE(all_in_host()) << "the prefetch never landed";
  daemon.store()->Flush();
  EXPECT_EQ(daemon.store()->Stats().movement.prefetch_promoted, 3u);
  EXPECT_EQ(daemon.store()->Stats().lower.at(0).reads, reads + 3);

  // In the host tier now: a second prefetch queues nothing; the lookup hits without the disk.
  EXPECT_EQ(scheduler->Prefetch({.request_id = "q", .prompt_tokens = prompt}), 0u);
  EXPECT_EQ(
      scheduler->GetNumNewMatchedTokens({.request_id = "q", .prompt_tokens = prompt}, 0).num_tokens,
      3 * kChunk);
  EXPECT_EQ(daemon.store()->Stats().lower.at(0).reads, reads + 3);
  const SchedulerStats stats = scheduler->Stats();
  EXPECT_EQ(stats.prefetches, 2u);
  EXPECT_EQ(stats.prefetch_failures, 0u);
  EXPECT_EQ(stats.prefetch_chunks, 3u);
}

// With async_loads, a hit that reaches below the host tier is offered as an asynchronous load
// (and planned as one); a hit wholly in the host tier, or any hit without the option, is not.
TEST(SchedulerConnectorDiskTest, HitsBelowTheHostTierAreOfferedAsAsynchronousLoads) {
  TestDaemon daemon({.capacity_bytes = 4 * 4096,
                     .policy = "lru",
                     .disk_capacity_bytes = 4ull << 20,
                     .disk_segment_bytes = 1ull << 20});
  ASSERT_TRUE(daemon.Start().ok());
  ConnectorOptions options = Options(daemon.socket_path());
  options.async_loads = true;
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(3 * kChunk + 5);
  Populate(*daemon.tier(), prompt, 3);
  const auto other = Prompt(4 * kChunk, 50000);
  Populate(*daemon.tier(), other, 4);  // pushes the prompt's chunks to disk

  MatchResult match =
      scheduler->GetNumNewMatchedTokens({.request_id = "d", .prompt_tokens = prompt}, 0);
  EXPECT_EQ(match.num_tokens, 3 * kChunk);
  EXPECT_TRUE(match.load_async);
  ASSERT_TRUE(scheduler->UpdateStateAfterAlloc("d", Blocks(13), match.num_tokens).ok());
  ConnectorMetadata meta = scheduler->BuildConnectorMeta({});
  ASSERT_EQ(meta.loads.size(), 1u);
  EXPECT_TRUE(meta.loads[0].async);
  EXPECT_FALSE(meta.loads[0].fail);
  EXPECT_EQ(scheduler->Stats().async_loads_offered, 1u);

  // In the host tier: synchronous, with the option or without it.
  match = scheduler->GetNumNewMatchedTokens({.request_id = "h", .prompt_tokens = other}, 0);
  EXPECT_EQ(match.num_tokens, 4 * kChunk - 1);
  EXPECT_FALSE(match.load_async);
  options.async_loads = false;
  auto sync_only = *SchedulerConnector::Create(options);
  match = sync_only->GetNumNewMatchedTokens({.request_id = "d", .prompt_tokens = prompt}, 0);
  EXPECT_EQ(match.num_tokens, 3 * kChunk);
  EXPECT_FALSE(match.load_async);

  // A request that finishes before its asynchronous load was sent: the load still goes out,
  // failed, so that the workers report the request the engine keeps blocks for.
  match = scheduler->GetNumNewMatchedTokens({.request_id = "a", .prompt_tokens = prompt}, 0);
  ASSERT_TRUE(match.load_async);
  ASSERT_TRUE(scheduler->UpdateStateAfterAlloc("a", Blocks(13), match.num_tokens).ok());
  EXPECT_FALSE(scheduler->RequestFinished("a", Blocks(13)));
  meta = scheduler->BuildConnectorMeta({.finished_request_ids = {"a"}});
  ASSERT_EQ(meta.loads.size(), 1u);
  EXPECT_EQ(meta.loads[0].request_id, "a");
  EXPECT_TRUE(meta.loads[0].async);
  EXPECT_TRUE(meta.loads[0].fail);
}

// A hybrid engine's groups load a request together: a host-tier hit made asynchronous.
TEST(SchedulerConnectorDiskTest, AHostHitCanBeMadeAsynchronous) {
  TestDaemon daemon;
  ASSERT_TRUE(daemon.Start().ok());
  ConnectorOptions options = Options(daemon.socket_path());
  options.async_loads = true;
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(3 * kChunk + 5);
  Populate(*daemon.tier(), prompt, 3);
  EXPECT_EQ(scheduler->MakeLoadAsync("h").code(), absl::StatusCode::kNotFound);
  MatchResult match =
      scheduler->GetNumNewMatchedTokens({.request_id = "h", .prompt_tokens = prompt}, 0);
  ASSERT_FALSE(match.load_async);
  ASSERT_TRUE(scheduler->MakeLoadAsync("h").ok());
  ASSERT_TRUE(scheduler->UpdateStateAfterAlloc("h", Blocks(13), match.num_tokens).ok());
  const ConnectorMetadata meta = scheduler->BuildConnectorMeta({});
  ASSERT_EQ(meta.loads.size(), 1u);
  EXPECT_TRUE(meta.loads[0].async);
  EXPECT_FALSE(meta.loads[0].fail);
  EXPECT_EQ(scheduler->Stats().async_loads_offered, 1u);

  options.async_loads = false;
  auto sync_only = *SchedulerConnector::Create(options);
  sync_only->GetNumNewMatchedTokens({.request_id = "h", .prompt_tokens = prompt}, 0);
  EXPECT_EQ(sync_only->MakeLoadAsync("h").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SchedulerConnectorDiskTest, PrefetchIsAHintThatNeverFails) {
  TestDaemon daemon;  // no disk tier, not started yet
  ManualClock clock;
  ConnectorOptions options = Options(daemon.socket_path());
  options.clock = &clock;
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(64);
  EXPECT_EQ(scheduler->Prefetch({.request_id = "a", .prompt_tokens = prompt}), 0u);
  EXPECT_EQ(scheduler->Stats().prefetch_failures, 1u);
  ASSERT_TRUE(daemon.Start().ok());
  clock.Advance(milliseconds(1000));
  EXPECT_EQ(scheduler->Prefetch({.request_id = "a", .prompt_tokens = prompt}), 0u);
  EXPECT_EQ(scheduler->Stats().prefetches, 2u);
  EXPECT_EQ(scheduler->Stats().prefetch_failures, 1u) << "answered: no disk tier, nothing queued";
  // Shorter than a chunk, or loads disabled: no round trip.
  EXPECT_EQ(scheduler->Prefetch({.request_id = "b", .prompt_tokens = Prompt(kChunk - 1)}), 0u);
  EXPECT_EQ(scheduler->Stats().prefetches, 2u);
  options.enable_load = false;
  auto disabled = *SchedulerConnector::Create(options);
  EXPECT_EQ(disabled->Prefetch({.request_id = "a", .prompt_tokens = prompt}), 0u);
  EXPECT_EQ(disabled->Stats().prefetches, 0u);
}

TEST(SchedulerConnectorNoDaemonTest, LookupsReportZeroAtOnceWhileTheDaemonIsAway) {
  TestDaemon daemon;  // not started
  ManualClock clock;
  ConnectorOptions options = Options(daemon.socket_path());
  options.clock = &clock;
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(64);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(scheduler->GetNumNewMatchedTokens({.request_id = "a", .prompt_tokens = prompt}, 0)
                  .num_tokens,
              0);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(100));
  EXPECT_EQ(scheduler->Stats().lookup_failures, 100u);
  EXPECT_FALSE(scheduler->Stats().connected);

  // The daemon arrives; after the backoff the scheduler finds it by itself.
  ASSERT_TRUE(daemon.Start().ok());
  Populate(*daemon.tier(), prompt, 4);
  clock.Advance(milliseconds(1000));
  EXPECT_EQ(
      scheduler->GetNumNewMatchedTokens({.request_id = "a", .prompt_tokens = prompt}, 0).num_tokens,
      63);
  EXPECT_TRUE(scheduler->Stats().connected);
}

// The lookup budget bounds the scheduler's wait on a daemon that accepts but never answers.
TEST(SchedulerConnectorNoDaemonTest, SilentDaemonCostsAtMostTheBudget) {
  TestDaemon dir;
  const std::string path = (dir.dir() / "silent.sock").string();
  // A listener that accepts connections (the kernel queues them) and never reads or answers.
  ScopedFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::listen(listener.get(), 16), 0);

  ConnectorOptions options = Options(path);
  options.lookup_budget = milliseconds(20);
  auto scheduler = *SchedulerConnector::Create(options);
  const auto prompt = Prompt(32 * 1024);
  const auto start = std::chrono::steady_clock::now();
  const MatchResult result =
      scheduler->GetNumNewMatchedTokens({.request_id = "s", .prompt_tokens = prompt}, 0);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.num_tokens, 0);
  EXPECT_LT(took, milliseconds(100));
  EXPECT_EQ(scheduler->Stats().lookup_failures, 1u);
}

TEST(ConnectorOptionsTest, ValidateNamesTheField) {
  ConnectorOptions options = Options("/tmp/s.sock");
  EXPECT_TRUE(options.Validate().ok());
  auto bad = options;
  bad.socket_path.clear();
  EXPECT_THAT(bad.Validate().message(), ::testing::HasSubstr("socket_path"));
  bad = options;
  bad.block_size = 0;
  EXPECT_THAT(bad.Validate().message(), ::testing::HasSubstr("block_size"));
  bad = options;
  bad.layout.head_dim = 0;
  EXPECT_THAT(bad.Validate().message(), ::testing::HasSubstr("layout"));
  bad = options;
  bad.lookup_budget = milliseconds(0);
  EXPECT_THAT(bad.Validate().message(), ::testing::HasSubstr("lookup_budget"));
  EXPECT_EQ(SchedulerConnector::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ConnectorMetadataTest, RoundTripsAndRejectsCorruption) {
  ConnectorMetadata meta;
  meta.block_size = 16;
  meta.chunk_tokens = 256;
  meta.loads.push_back({.request_id = "a",
                        .tokens = {1, 2, 3},
                        .tenant_salt = "salt",
                        .lora_name = "lora",
                        .token_begin = 16,
                        .token_end = 300,
                        .block_ids = {5, 6, 7},
                        .fail = false});
  meta.loads.push_back({.request_id = "b", .token_end = 4, .block_ids = {1}, .fail = true});
  meta.loads.push_back({.request_id = "d", .token_end = 8, .block_ids = {2, 3}, .async = true});
  meta.saves.push_back({.request_id = "c",
                        .tokens = Prompt(512),
                        .token_end = 512,
                        .block_ids = Blocks(32),
                        .hold_ms = 30'000});
  meta.finished_request_ids = {"x", "y"};
  const std::string bytes = meta.Serialize();
  auto back = ConnectorMetadata::Deserialize(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, meta);
  EXPECT_EQ(*ConnectorMetadata::Deserialize(ConnectorMetadata{}.Serialize()), ConnectorMetadata{});

  for (size_t cut : {size_t{0}, size_t{3}, size_t{9}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_EQ(
        ConnectorMetadata::Deserialize(std::string_view(bytes).substr(0, cut)).status().code(),
        absl::StatusCode::kInvalidArgument)
        << "cut at " << cut;
  }
  EXPECT_FALSE(ConnectorMetadata::Deserialize(bytes + "x").ok());
  std::string wrong_version = bytes;
  wrong_version[4] = 9;
  EXPECT_THAT(ConnectorMetadata::Deserialize(wrong_version).status().message(),
              ::testing::HasSubstr("version"));
  std::string unknown_flag = bytes;
  const size_t flags_at = unknown_flag.find("d") + 1 + 4 + 4 + 4 + 8 + 8 + 4 + 8;  // spec "d"'s
  ASSERT_EQ(unknown_flag[flags_at], '\x02');
  unknown_flag[flags_at] = '\x04';
  EXPECT_FALSE(ConnectorMetadata::Deserialize(unknown_flag).ok());
  std::string huge_count = bytes;
  huge_count[16] = '\xff';  // the load count
  huge_count[17] = '\xff';
  EXPECT_FALSE(ConnectorMetadata::Deserialize(huge_count).ok());
}

}  // namespace
}  // namespace strata::connector
