// What each policy is for, one behaviour at a time (the contract is in
// policy_contract_test.cc).
#include "gtest/gtest.h"
#include "storage/policy/adaptive_policy.h"
#include "storage/policy/arc_policy.h"
#include "storage/policy/ghost_list.h"
#include "storage/policy/prefix_lru_policy.h"
#include "storage/policy/s3fifo_policy.h"
#include "storage/policy/tenant_quota_policy.h"

namespace strata::storage {
namespace {

constexpr uint64_t kChunk = 100;

PolicyChunkInfo Chunk(ChunkId id, ChunkId parent = kNoChunk) {
  return {.id = id, .key_hash = id * 1000, .size_bytes = kChunk, .parent = parent};
}

TEST(GhostList, RemembersNewestWithinBudget) {
  GhostList ghosts(3 * kChunk);
  for (uint64_t hash = 1; hash <= 4; ++hash) ghosts.Add(hash, kChunk);
  EXPECT_EQ(ghosts.size(), 3u);
  EXPECT_FALSE(ghosts.Take(1));  // the oldest fell out
  EXPECT_TRUE(ghosts.Take(2));
  EXPECT_FALSE(ghosts.Take(2));  // taken once
  ghosts.Add(3, kChunk);         // re-adding moves it to the newest end
  ghosts.TrimTo(kChunk);
  EXPECT_TRUE(ghosts.Take(3));
  EXPECT_EQ(ghosts.bytes(), 0u);
}

TEST(ArcPolicy, ChunksSeenTwiceOutliveAScan) {
  ArcPolicy arc(4 * kChunk);
  arc.OnInsert(Chunk(1));
  arc.OnAccess(1);  // now in T2
  for (ChunkId id = 2; id <= 5; ++id) arc.OnInsert(Chunk(id));
  // T1 (2..5) is above the target (0): the scan goes first, oldest first.
  EXPECT_EQ(arc.PopVictim(), 2u);
  EXPECT_EQ(arc.PopVictim(), 3u);
}

TEST(ArcPolicy, GhostHitInRecentGrowsTheRecentTarget) {
  ArcPolicy arc(4 * kChunk);
  arc.OnInsert(Chunk(1));
  EXPECT_EQ(arc.PopVictim(), 1u);  // 1 goes to B1
  EXPECT_EQ(arc.target_recent_bytes(), 0u);
  arc.OnInsert({.id = 7, .key_hash = 1000, .size_bytes = kChunk});  // chunk 1's key returns
  EXPECT_EQ(arc.target_recent_bytes(), kChunk);
}

TEST(S3FifoPolicy, OneTimeChunksLeaveBeforeChunksReadOnProbation) {
  S3FifoPolicy s3(10 * kChunk);
  s3.OnInsert(Chunk(1));
  s3.OnAccess(1);
  s3.OnInsert(Chunk(2));
  // 1 was read while in the small queue: it moves to main, 2 leaves.
  EXPECT_EQ(s3.PopVictim(), 2u);
  s3.OnInsert(Chunk(3));
  EXPECT_EQ(s3.PopVictim(), 3u);
  // A returning ghost goes straight to main, behind 1.
  s3.OnInsert({.id = 9, .key_hash = Chunk(2).key_hash, .size_bytes = kChunk});
  EXPECT_EQ(s3.PopVictim(), 1u);
  EXPECT_EQ(s3.PopVictim(), 9u);
}

TEST(AdaptivePolicy, PartialChunksGoFirstThenProbationThenMain) {
  AdaptivePolicy policy(10 * kChunk, {.initial_probation_fraction = 0.0});
  policy.OnInsert(Chunk(1));
  policy.OnAccess(1);  // read on probation: moves to main
  policy.OnInsert(Chunk(2));
  PolicyChunkInfo tail = Chunk(3);
  tail.partial = true;
  policy.OnInsert(tail);
  EXPECT_EQ(policy.PopVictim(), 3u);  // the partial chunk, though newest
  EXPECT_EQ(policy.PopVictim(), 2u);  // probation, above its target of 0
  EXPECT_EQ(policy.PopVictim(), 1u);  // main, once probation is empty
}

TEST(AdaptivePolicy, GhostHitsMoveTheProbationTarget) {
  AdaptivePolicy policy(10 * kChunk,
                        {.initial_probation_fraction = 0.0, .adaptation_step_chunks = 2});
  policy.OnInsert(Chunk(1));
  EXPECT_EQ(policy.PopVictim(), 1u);  // evicted from probation
  policy.OnInsert({.id = 5, .key_hash = Chunk(1).key_hash, .size_bytes = kChunk});
  EXPECT_EQ(policy.probation_target_bytes(), 2 * kChunk);  // probation was too small
  EXPECT_EQ(policy.PopVictim(), 5u);                       // 5 is in main: evicted from there
  policy.OnInsert({.id = 6, .key_hash = Chunk(1).key_hash, .size_bytes = kChunk});
  EXPECT_EQ(policy.probation_target_bytes(), 0u);  // main evicted it: main was too small
}

TEST(AdaptivePolicy, ProbationWithinItsTargetIsKeptOverMain) {
  AdaptivePolicy policy(10 * kChunk, {.initial_probation_fraction = 0.5});
  policy.OnInsert(Chunk(1));
  policy.OnAccess(1);
  for (ChunkId id = 2; id <= 8; ++id) policy.OnInsert(Chunk(id));
  // Probation holds 7 chunks (1 was read: main) against a target of 5: 2 and 3 leave.
  EXPECT_EQ(policy.PopVictim(), 2u);
  EXPECT_EQ(policy.PopVictim(), 3u);
  // Probation (4..8) is at its target now: main gives.
  EXPECT_EQ(policy.PopVictim(), 1u);
  EXPECT_EQ(policy.PopVictim(), 4u);
}

// A promoted chunk (reused) was asked for again: it skips probation, so promoting more chunks
// into a full tier evicts new, unread chunks before the ones just promoted.
PolicyChunkInfo Reused(ChunkId id) {
  PolicyChunkInfo info = Chunk(id);
  info.reused = true;
  return info;
}

TEST(AdaptivePolicy, ReusedChunksSkipProbation) {
  AdaptivePolicy policy(10 * kChunk, {.initial_probation_fraction = 0.0});
  policy.OnInsert(Reused(1));
  policy.OnInsert(Chunk(2));
  policy.OnInsert(Reused(3));
  EXPECT_EQ(policy.PopVictim(), 2u);  // probation, above its target of 0
  EXPECT_EQ(policy.PopVictim(), 1u);  // then main, oldest first
  EXPECT_EQ(policy.PopVictim(), 3u);
}

TEST(S3FifoPolicy, ReusedChunksSkipTheSmallQueue) {
  S3FifoPolicy s3(10 * kChunk);
  s3.OnInsert(Reused(1));
  s3.OnInsert(Chunk(2));
  EXPECT_EQ(s3.PopVictim(), 2u);
  EXPECT_EQ(s3.PopVictim(), 1u);
}

TEST(ArcPolicy, ReusedChunksEnterTheFrequentList) {
  ArcPolicy arc(4 * kChunk);
  arc.OnInsert(Reused(1));
  for (ChunkId id = 2; id <= 3; ++id) arc.OnInsert(Chunk(id));
  EXPECT_EQ(arc.PopVictim(), 2u);  // T1 above its target of 0
  EXPECT_EQ(arc.PopVictim(), 3u);
  EXPECT_EQ(arc.PopVictim(), 1u);
}

TEST(PrefixLruPolicy, EvictsChainsTailFirst) {
  PrefixLruPolicy policy;
  policy.OnInsert(Chunk(1));
  policy.OnInsert(Chunk(2, 1));
  policy.OnInsert(Chunk(3, 2));
  policy.OnInsert(Chunk(10));
  policy.OnAccess(10);
  policy.OnAccess(1);  // the head is the most recently used, yet its tail goes first
  EXPECT_EQ(policy.PopVictim(), 3u);
  EXPECT_EQ(policy.PopVictim(), 2u);  // the parent became a leaf at the cold end
  EXPECT_EQ(policy.PopVictim(), 1u);
  EXPECT_EQ(policy.PopVictim(), 10u);
}

TEST(PrefixLruPolicy, FallsBackToInnerChunksWhenLeavesAreProtected) {
  PrefixLruPolicy policy;
  policy.OnInsert(Chunk(1));
  policy.OnInsert(Chunk(2, 1));
  policy.SetEvictable(2, false);
  EXPECT_EQ(policy.PopVictim(), 1u);
  EXPECT_EQ(policy.PopVictim(), std::nullopt);
  policy.SetEvictable(2, true);
  EXPECT_EQ(policy.PopVictim(), 2u);
}

TEST(TenantQuotaPolicy, ATenantAboveItsQuotaLosesItsOwnChunks) {
  TenantQuotaPolicy policy(
      "lru", {.capacity_bytes = 10 * kChunk, .tenant_quotas = {{1, 2 * kChunk}, {2, 8 * kChunk}}});
  for (ChunkId id = 1; id <= 4; ++id) {
    PolicyChunkInfo info = Chunk(id);
    info.tenant = 2;
    policy.OnInsert(info);
  }
  for (ChunkId id = 5; id <= 8; ++id) {  // tenant 1 borrows beyond its quota of 2
    PolicyChunkInfo info = Chunk(id);
    info.tenant = 1;
    policy.OnInsert(info);
  }
  EXPECT_EQ(policy.tenant_bytes(1), 4 * kChunk);
  // Tenant 1 is at 200% of its quota, tenant 2 at 50%: tenant 1 pays, oldest first.
  EXPECT_EQ(policy.PopVictim(), 5u);
  EXPECT_EQ(policy.PopVictim(), 6u);
  // Both at 100%: the tie goes either way, but once tenant 1 has no evictable chunk the
  // victims come from tenant 2.
  policy.SetEvictable(7, false);
  policy.SetEvictable(8, false);
  EXPECT_EQ(policy.PopVictim(), 1u);
  EXPECT_EQ(policy.tenant_bytes(2), 3 * kChunk);
}

}  // namespace
}  // namespace strata::storage
