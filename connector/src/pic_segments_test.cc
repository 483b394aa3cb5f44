#include "connector/src/pic_segments.h"

#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_layout.h"

namespace strata::connector::internal {
namespace {

constexpr uint32_t kPad = 0;
constexpr uint32_t kBlock = 16;

KeyHasher Hasher() {
  return *KeyHasher::Create(test_support::SmallLayout({.model_id = "pic-test", .chunk_tokens = 64}),
                            {});
}

// `count` distinct non-pad tokens starting at `first`.
std::vector<uint32_t> Tokens(uint32_t first, uint32_t count) {
  std::vector<uint32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::vector<uint32_t> Concat(std::initializer_list<std::vector<uint32_t>> parts) {
  std::vector<uint32_t> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

// Every segment's tokens are where the segment says in the padded prompt, its pads beside them.
void ExpectLaidOut(const PicPrompt& split, std::span<const uint32_t> prompt) {
  uint32_t padded = 0;
  for (const PicSegment& segment : split.segments) {
    EXPECT_EQ(segment.padded_begin, padded);
    const uint32_t first_real =
        segment.padded_begin + (segment.kind == SegmentKind::kChunk ? segment.pad_tokens : 0);
    for (uint32_t i = 0; i < segment.source_tokens(); ++i) {
      ASSERT_EQ(split.padded_tokens[first_real + i], prompt[segment.source_begin + i]);
    }
    const uint32_t first_pad = segment.kind == SegmentKind::kChunk
                                   ? segment.padded_begin
                                   : first_real + segment.source_tokens();
    for (uint32_t i = 0; i < segment.pad_tokens; ++i) {
      ASSERT_EQ(split.padded_tokens[first_pad + i], kPad);
    }
    if (segment.kind == SegmentKind::kChunk) {
      EXPECT_EQ(segment.padded_begin % kBlock, 0u) << "a chunk starts on a block boundary";
      EXPECT_EQ(segment.padded_tokens() % kBlock, 0u) << "and ends on one";
      EXPECT_LT(segment.pad_tokens, kBlock);
      EXPECT_FALSE(segment.key.empty());
      EXPECT_EQ(segment.key.key_namespace(), KeyNamespace::kPositionIndependent);
    } else {
      EXPECT_TRUE(segment.key.empty());
    }
    padded += segment.padded_tokens();
  }
  EXPECT_EQ(padded, split.padded_tokens.size());
}

TEST(PicSegmentsTest, ChunksArePaddedToBlocksAndPromptSegmentsPadTheChunkThatFollows) {
  const KeyHasher hasher = Hasher();
  // system (10) | chunk A (40) | text (5) | chunk B (32) | question (7)
  const std::vector<uint32_t> prompt = Concat(
      {Tokens(1000, 10), Tokens(2000, 40), Tokens(3000, 5), Tokens(4000, 32), Tokens(5000, 7)});
  const std::vector<SegmentMarker> chunks = {{10, 50}, {55, 87}};
  auto split = SplitPicPrompt(prompt, chunks, hasher, {.block_tokens = kBlock, .pad_token = kPad});
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_EQ(split->segments.size(), 5u);
  ExpectLaidOut(*split, prompt);
  const auto& s = split->segments;
  EXPECT_EQ(s[0].kind, SegmentKind::kPrompt);
  EXPECT_EQ(s[0].pad_tokens, 6u);  // 10 -> 16: chunk A starts at 16
  EXPECT_EQ(s[1].kind, SegmentKind::kChunk);
  EXPECT_EQ(s[1].pad_tokens, 8u);   // 40 -> 48, leading
  EXPECT_EQ(s[2].pad_tokens, 11u);  // 5 -> 16
  EXPECT_EQ(s[3].pad_tokens, 0u);   // 32 is whole blocks
  EXPECT_EQ(s[4].kind, SegmentKind::kPrompt);
  EXPECT_EQ(s[4].pad_tokens, 0u);  // the final prompt segment is not padded
  EXPECT_EQ(split->padded_tokens.size(), 16u + 48 + 16 + 32 + 7);
  // The key is the chunk's canonical form's.
  EXPECT_EQ(s[1].key, hasher.PicKey(CanonicalPicTokens(Tokens(2000, 40), kBlock, kPad), 0));
}

TEST(PicSegmentsTest, AChunksKeyDoesNotDependOnWhereItAppearsButOnItsCompileVariant) {
  const KeyHasher hasher = Hasher();
  const std::vector<uint32_t> passage = Tokens(7000, 37);
  const std::vector<uint32_t> early = Concat({Tokens(1, 3), passage, Tokens(9, 4)});
  const std::vector<uint32_t> late = Concat({Tokens(100, 61), passage});
  auto a = SplitPicPrompt(early, std::vector<SegmentMarker>{{3, 40}}, hasher, {});
  auto b = SplitPicPrompt(late, std::vector<SegmentMarker>{{61, 98}}, hasher, {});
  ASSERT_TRUE(a.ok() && b.ok());
  const PicSegment& in_a = a->segments[1];
  const PicSegment& in_b = b->segments[1];
  ASSERT_EQ(in_a.kind, SegmentKind::kChunk);
  ASSERT_EQ(in_b.kind, SegmentKind::kChunk);
  EXPECT_EQ(in_a.key, in_b.key);
  EXPECT_NE(in_a.padded_begin, in_b.padded_begin);
  // Its padded tokens are the same blocks in both prompts.
  EXPECT_TRUE(std::equal(a->padded_tokens.begin() + in_a.padded_begin,
                         a->padded_tokens.begin() + in_a.padded_begin + in_a.padded_tokens(),
                         b->padded_tokens.begin() + in_b.padded_begin));
  auto variant =
      SplitPicPrompt(late, std::vector<SegmentMarker>{{61, 98}}, hasher, {.compile_variant = 3});
  ASSERT_TRUE(variant.ok());
  EXPECT_NE(variant->segments[1].key, in_b.key);
  // A tenant's chunks are keyed in its namespace: the same for its requests, apart from others'.
  const std::vector<SegmentMarker> at_61{{61, 98}};
  auto tenant_a = SplitPicPrompt(late, at_61, hasher, {}, "tenant-a");
  auto tenant_a_early =
      SplitPicPrompt(early, std::vector<SegmentMarker>{{3, 40}}, hasher, {}, "tenant-a");
  auto tenant_b = SplitPicPrompt(late, at_61, hasher, {}, "tenant-b");
  ASSERT_TRUE(tenant_a.ok() && tenant_a_early.ok() && tenant_b.ok());
  EXPECT_EQ(tenant_a->segments[1].key, tenant_a_early->segments[1].key);
  EXPECT_NE(tenant_a->segments[1].key, in_b.key);
  EXPECT_NE(tenant_a->segments[1].key, tenant_b->segments[1].key);
  // Adjacent chunks, and a chunk that is the whole prompt.
  auto adjacent = SplitPicPrompt(late, std::vector<SegmentMarker>{{0, 61}, {61, 98}}, hasher, {});
  ASSERT_TRUE(adjacent.ok());
  ASSERT_EQ(adjacent->segments.size(), 2u);
  EXPECT_EQ(adjacent->segments[1].key, in_b.key);
  ExpectLaidOut(*adjacent, late);
}

TEST(PicSegmentsTest, WithoutMarkersThePromptIsOneUnpaddedPromptSegment) {
  const std::vector<uint32_t> prompt = Tokens(1, 21);
  auto split = SplitPicPrompt(prompt, {}, Hasher(), {});
  ASSERT_TRUE(split.ok());
  ASSERT_EQ(split->segments.size(), 1u);
  EXPECT_EQ(split->segments[0].kind, SegmentKind::kPrompt);
  EXPECT_EQ(split->padded_tokens, prompt);
}

TEST(PicSegmentsTest, BadMarkersAreRefusedNamingTheMarker) {
  const KeyHasher hasher = Hasher();
  const std::vector<uint32_t> prompt = Tokens(1, 50);
  struct Case {
    std::vector<SegmentMarker> markers;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{{5, 5}}, "marker 0 [5, 5) is empty"},
      {{{7, 3}}, "marker 0 [7, 3) is empty"},
      {{{10, 51}}, "beyond the prompt's 50 tokens"},
      {{{0, 20}, {10, 30}}, "marker 1 [10, 30) overlaps"},
      {{{30, 40}, {0, 10}}, "marker 1 [0, 10) overlaps or precedes"},
  };
  for (const Case& c : cases) {
    const absl::Status status = SplitPicPrompt(prompt, c.markers, hasher, {}).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_NE(status.ToString().find(c.says), std::string::npos) << status;
  }
  EXPECT_EQ(SplitPicPrompt(prompt, {}, hasher, {.block_tokens = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PicSegmentsTest, SeparatorsSplitThePromptIntoChunksBeforeEachSeparator) {
  const std::vector<uint32_t> sep = {900, 901};
  // A sep B sep sep Q: chunks A and B (the empty piece between two separators is none).
  const std::vector<uint32_t> prompt =
      Concat({Tokens(1, 5), sep, Tokens(20, 8), sep, sep, Tokens(40, 3)});
  auto markers = MarkersFromSeparator(prompt, sep);
  ASSERT_TRUE(markers.ok());
  EXPECT_EQ(*markers, (std::vector<SegmentMarker>{{0, 5}, {7, 15}}));
  auto split = SplitPicPrompt(prompt, *markers, Hasher(), {});
  ASSERT_TRUE(split.ok()) << split.status();
  ExpectLaidOut(*split, prompt);
  EXPECT_EQ(split->segments.back().kind, SegmentKind::kPrompt);  // the separators and Q

  EXPECT_TRUE(MarkersFromSeparator(Tokens(1, 9), sep)->empty());
  EXPECT_EQ(MarkersFromSeparator(prompt, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::connector::internal
