#include <unistd.h>

#include <fstream>

#include "bench/trace/belady.h"
#include "bench/trace/synthetic_traces.h"
#include "bench/trace/trace.h"
#include "bench/trace/trace_replay.h"
#include "gtest/gtest.h"
#include "storage/policy/eviction_policy.h"

namespace strata::bench {
namespace {

TraceRequest Request(std::vector<uint64_t> blocks, bool partial_last = false) {
  const uint32_t tokens = static_cast<uint32_t>(blocks.size()) * kTraceBlockTokens;
  return {.input_tokens = partial_last ? tokens - 100 : tokens, .blocks = std::move(blocks)};
}

TEST(TraceParsing, ReadsMooncakeLines) {
  absl::StatusOr<TraceRequest> request = ParseTraceLine(
      R"({"timestamp": 27, "input_length": 1025, "output_length": 5, "hash_ids": [4, 5, 6]})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->timestamp_ms, 27);
  EXPECT_EQ(request->input_tokens, 1025u);
  EXPECT_EQ(request->blocks, (std::vector<uint64_t>{4, 5, 6}));
  EXPECT_TRUE(request->last_block_partial());
}

TEST(TraceParsing, RejectsMalformedLines) {
  for (const char* line : {
           R"({"timestamp": 1, "hash_ids": [1]})",                          // no input_length
           R"({"timestamp": 1, "input_length": 512, "hash_ids": [1, 2]})",  // wrong block count
           R"({"timestamp": 1, "input_length": 512, "hash_ids": [1})",      // unclosed
           R"({"timestamp": 1, "input_length": 512, "hash_ids": [-1]})",    // negative id
           R"({"timestamp": 1, "input_length": 0, "hash_ids": []})",        // empty prompt
       }) {
    EXPECT_EQ(ParseTraceLine(line).status().code(), absl::StatusCode::kInvalidArgument) << line;
  }
}

TEST(TraceParsing, LoadNamesTheBadLine) {
  const std::string path = testing::TempDir() + "/trace_" + std::to_string(getpid()) + ".jsonl";
  {
    std::ofstream out(path);
    out << R"({"timestamp": 0, "input_length": 512, "hash_ids": [0]})"
        << "\n\n";
    out << R"({"timestamp": 1, "input_length": 512})"
        << "\n";
  }
  absl::StatusOr<Trace> trace = LoadTrace(path);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(trace.status().message().find(":3:"), std::string::npos) << trace.status();
  EXPECT_EQ(LoadTrace(path + ".missing").status().code(), absl::StatusCode::kNotFound);
  unlink(path.c_str());
}

TEST(Belady, KeepsWhatIsUsedSoonestAndBypassesTheRest) {
  // a b c a b c with room for two: c is bypassed (used last), a and b hit.
  const Trace trace{.requests = {Request({1}), Request({2}), Request({3}), Request({1}),
                                 Request({2}), Request({3})}};
  EXPECT_DOUBLE_EQ(BeladyHitRatio(trace, 2), 2.0 / 6);
  EXPECT_DOUBLE_EQ(BeladyHitRatio(trace, 3), 3.0 / 6);
  EXPECT_DOUBLE_EQ(BeladyHitRatio(trace, 0), 0);
}

TEST(TraceReplay, CountsTheLongestCachedPrefixOnly) {
  // Request 3 shares blocks 1 and 2 with request 1 but not block 7: the prefix hit stops at 2.
  const Trace trace{.requests = {Request({1, 2, 3}), Request({1, 2, 4}), Request({1, 7, 3})}};
  absl::StatusOr<ReplayResult> result =
      ReplayOnHostTier(trace, {.policy = "lru", .capacity_blocks = 100});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->total_blocks, 9u);
  EXPECT_EQ(result->hit_blocks, 2u + 1u);
  EXPECT_EQ(result->bytes_written, 5u * 4096);  // 1 2 3, 4, 7 (3 is resident already)
  EXPECT_EQ(result->bytes_read, 3u * 4096);
  EXPECT_EQ(result->wrong_payloads, 0u);
  EXPECT_EQ(result->evictions, 0u);
}

TEST(TraceReplay, TheDefaultGivesUpPartialChunksFirst) {
  // Request 1 ends in a partial block (2). Storing block 3 needs one eviction: LRU takes block 1
  // (oldest), the default takes the partial block, so request 3 hits only with the default.
  const Trace trace{
      .requests = {Request({1, 2}, /*partial_last=*/true), Request({3}), Request({1})}};
  absl::StatusOr<ReplayResult> lru =
      ReplayOnHostTier(trace, {.policy = "lru", .capacity_blocks = 2});
  absl::StatusOr<ReplayResult> adaptive =
      ReplayOnHostTier(trace, {.policy = "adaptive", .capacity_blocks = 2});
  ASSERT_TRUE(lru.ok() && adaptive.ok());
  EXPECT_EQ(lru->hit_blocks, 0u);
  EXPECT_EQ(adaptive->hit_blocks, 1u);
  EXPECT_EQ(adaptive->evictions, 1u);
}

TEST(TraceReplay, RejectsBadOptions) {
  const Trace trace{.requests = {Request({1})}};
  EXPECT_EQ(ReplayOnHostTier(trace, {.policy = "lru", .capacity_blocks = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReplayOnHostTier(trace, {.policy = "nope", .capacity_blocks = 4}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SyntheticTraces, AreDeterministicAndWellFormed) {
  const MrqaTraceOptions small{.users = 20, .concurrent_users = 4, .rounds = 3};
  const Trace a = MakeMrqaTrace(small), b = MakeMrqaTrace(small);
  ASSERT_EQ(a.requests.size(), 60u);
  for (size_t i = 0; i < a.requests.size(); ++i) {
    EXPECT_EQ(a.requests[i].blocks, b.requests[i].blocks);
    const TraceRequest& r = a.requests[i];
    EXPECT_EQ(r.blocks.size(), (r.input_tokens + kTraceBlockTokens - 1) / kTraceBlockTokens);
  }
  const Trace rag = MakeRagTrace({.requests = 50});
  EXPECT_EQ(rag.requests.size(), 50u);
  // Every prompt starts with the same system prompt: its first block is shared.
  for (const TraceRequest& r : rag.requests) EXPECT_EQ(r.blocks[0], rag.requests[0].blocks[0]);
}

TEST(SyntheticTraces, BeladyBoundsEveryPolicy) {
  const Trace trace = MakeMrqaTrace({.users = 60, .concurrent_users = 10, .rounds = 4});
  const uint64_t unique = trace.unique_blocks();
  for (uint64_t capacity : {unique / 50, unique / 10}) {
    const double bound = BeladyHitRatio(trace, capacity);
    for (std::string_view policy : storage::EvictionPolicyNames()) {
      absl::StatusOr<ReplayResult> result =
          ReplayOnHostTier(trace, {.policy = std::string(policy), .capacity_blocks = capacity});
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_LE(result->hit_ratio(), bound + 1e-9) << policy << " at " << capacity;
      EXPECT_GT(result->hit_ratio(), 0) << policy << " at " << capacity;
      EXPECT_EQ(result->wrong_payloads, 0u);
    }
  }
}

}  // namespace
}  // namespace strata::bench
