// The token-dropping codecs (token_drop_codec.h): which blocks they keep, that kept tokens are
// exact and read at their own positions, that nothing dropped is ever decoded, and their refusals.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/encoded_chunk.h"
#include "storage/codec/testing/codec_test_util.h"
#include "storage/codec/testing/shaped_kv.h"
#include "storage/codec/token_drop_codec.h"

namespace strata::storage {
namespace {

using testing::CodecTestLayout;
using ::testing::ElementsAre;
using testing::EncodeOrDie;
using ::testing::HasSubstr;
using testing::KvShape;
using testing::MakeKv;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kPrecondition = absl::StatusCode::kFailedPrecondition;

const TokenDropCodec& Drop(std::string_view name) {
  return dynamic_cast<const TokenDropCodec&>(**CodecRegistry::Find(name));
}

KvLayout NopeLayout(KvDtype dtype, uint32_t layers = 2, uint32_t heads = 2, uint32_t head_dim = 64,
                    uint32_t chunk_tokens = 128) {
  KvLayout layout = CodecTestLayout("drop-test", dtype, layers, heads, head_dim, chunk_tokens);
  layout.positional = PositionalFormat::kNope;
  return layout;
}

// The rows of tokens [first, first + count) of plane `plane` of layer `layer` of a chunk.
std::vector<std::byte> Rows(const KvLayout& layout, uint32_t num_tokens,
                            std::span<const std::byte> chunk, uint32_t layer, uint32_t plane,
                            uint32_t first, uint32_t count) {
  const uint64_t at =
      layout.plane_offset(layer, plane, num_tokens) + uint64_t{first} * layout.plane_token_bytes();
  return {chunk.begin() + at, chunk.begin() + at + uint64_t{count} * layout.plane_token_bytes()};
}

TEST(TokenDropTest, TheRegistryNamesBothAndTheyDropTokens) {
  for (std::string_view name : {"drop_sink_recent", "drop_h2o"}) {
    const Codec& codec = **CodecRegistry::Find(name);
    EXPECT_EQ(codec.name(), name);
    EXPECT_TRUE(codec.drops_tokens());
    EXPECT_EQ(*CodecRegistry::Find(codec.id()), &codec);
  }
  EXPECT_FALSE((*CodecRegistry::Find("int8"))->drops_tokens());
}

TEST(TokenDropTest, DefaultsKeepTheSinkBlockAndTheLastEighthAndH2oTheHeaviestBlocks) {
  const KvLayout layout = NopeLayout(KvDtype::kBfloat16, 1, 1, 64, 256);
  // 16 blocks of 16: the sink is block 0, the recent window 256 / 8 = 32 tokens: blocks 14, 15.
  EXPECT_THAT(*Drop("drop_sink_recent").KeptBlocks(layout, 256, {}), ElementsAre(0, 14, 15));
  std::vector<float> importance(256, 0.01f);
  for (int t = 80; t < 96; ++t) importance[t] = 1.0f;  // block 5
  importance[150] = 9.0f;                              // block 9, by one token
  importance[3] = 50.0f;                               // block 0: kept anyway, as the sink
  // heavy_tokens 0: as many as the recent window (2 blocks).
  EXPECT_THAT(*Drop("drop_h2o").KeptBlocks(layout, 256, {.importance = importance}),
              ElementsAre(0, 5, 9, 14, 15));
  // Ties go to the earlier block; budgets round up to whole blocks.
  const std::vector<float> flat(256, 1.0f);
  EXPECT_THAT(
      *Drop("drop_h2o")
           .KeptBlocks(
               layout, 256,
               {.sink_tokens = 4, .recent_tokens = 17, .heavy_tokens = 1, .importance = flat}),
      ElementsAre(0, 1, 14, 15));
  // A short chunk: 200 tokens are 13 blocks, the last one of 8 tokens; its eighth is 25 tokens.
  EXPECT_THAT(*Drop("drop_sink_recent").KeptBlocks(layout, 200, {}), ElementsAre(0, 11, 12));
  // Larger budgets than the chunk keep every block once.
  EXPECT_EQ(Drop("drop_sink_recent").KeptBlocks(layout, 256, {.sink_tokens = 1000})->size(), 16u);
  EXPECT_EQ(Drop("drop_sink_recent")
                .KeptBlocks(layout, 256, {.sink_tokens = 128, .recent_tokens = 128})
                ->size(),
            16u);
}

TEST(TokenDropTest, ABudgetOverEveryTokenIsTheIdentity) {
  for (KvDtype dtype : {KvDtype::kBfloat16, KvDtype::kFloat32}) {
    const KvLayout layout = NopeLayout(dtype, 3);
    const std::vector<std::byte> kv = MakeKv(layout, 120, KvShape::kShaped, 5);
    std::vector<float> importance(120, 1.0f);
    for (const auto& [name, params] :
         {std::pair{"drop_sink_recent", CodecParams{.recent_tokens = 120}},
          std::pair{"drop_h2o", CodecParams{.heavy_tokens = 120, .importance = importance}}}) {
      const TokenDropCodec& codec = Drop(name);
      const std::vector<std::byte> frame = EncodeOrDie(codec, layout, 120, kv, params);
      EXPECT_EQ(testing::DecodeOrDie(codec, layout, 120, frame), kv) << name;
      std::vector<std::byte> layer(layout.layer_bytes(120));
      ASSERT_TRUE(codec.DecodeLayer(layout, frame, 2, layer).ok()) << name;
      EXPECT_EQ(layer, std::vector<std::byte>(kv.begin() + 2 * layer.size(), kv.end())) << name;
      absl::StatusOr<KeptTokens> kept = codec.DecodeKept(layout, frame);
      ASSERT_TRUE(kept.ok()) << kept.status();
      EXPECT_EQ(kept->num_tokens, 120u);
      EXPECT_EQ(kept->payload, kv) << name;
      EXPECT_EQ(kept->blocks.size(), 8u);
      // A whole frame checks like any codec's: corrupted sections fail alone, foreign bytes and
      // truncations are refused.
      testing::ExpectCorruptSectionsFailAlone(codec, layout, 120, frame, 10, 3);
      testing::ExpectRejected(codec, layout, 120, std::span(frame).first(frame.size() - 4),
                              absl::StatusCode::kDataLoss, "truncated");
      const std::vector<std::byte> int8 =
          EncodeOrDie(**CodecRegistry::Find("int8"), layout, 120, kv);
      testing::ExpectRejected(codec, layout, 120, int8, kInvalid, "another codec's frame");
    }
  }
}

TEST(TokenDropTest, KeptTokensAreExactAndDroppedOnesAreNeverDecoded) {
  for (const KvKind kind : {KvKind::kMha, KvKind::kMlaLatent}) {
    KvLayout layout = NopeLayout(KvDtype::kFloat16, 2, kind == KvKind::kMha ? 2 : 1, 64);
    layout.kind = kind;
    const uint32_t tokens = 100;  // 7 blocks, the last of 4 tokens
    const std::vector<std::byte> kv = MakeKv(layout, tokens, KvShape::kShaped, 9);
    std::vector<float> importance(tokens, 0.0f);
    importance[40] = 1.0f;  // block 2
    const TokenDropCodec& h2o = Drop("drop_h2o");
    const std::vector<std::byte> frame =
        EncodeOrDie(h2o, layout, tokens, kv, {.heavy_tokens = 16, .importance = importance});
    // Decode and DecodeLayer refuse: no zero stands in for a dropped token.
    std::vector<std::byte> out(kv.size());
    const absl::Status whole = h2o.Decode(layout, frame, out);
    EXPECT_EQ(whole.code(), kPrecondition);
    EXPECT_THAT(whole.message(), HasSubstr("kept 36 of this chunk's 100 tokens"));
    std::vector<std::byte> layer(layout.layer_bytes(tokens));
    EXPECT_EQ(h2o.DecodeLayer(layout, frame, 1, layer).code(), kPrecondition);

    // Blocks 0 (sink), 2 (heavy), 6 (recent: 13 tokens, one block of 4) hold 16 + 16 + 4 tokens.
    absl::StatusOr<KeptTokens> kept = h2o.DecodeKept(layout, frame);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_THAT(kept->blocks, ElementsAre(0, 2, 6));
    EXPECT_THAT(kept->BlockPositions(), ElementsAre(0, 32, 96));
    ASSERT_EQ(kept->num_tokens, 36u);
    ASSERT_EQ(kept->payload.size(), layout.chunk_bytes(36));
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      for (uint32_t p = 0; p < layout.planes_per_layer(); ++p) {
        std::vector<std::byte> expected = Rows(layout, tokens, kv, l, p, 0, 16);
        for (const auto& [first, count] : {std::pair{32u, 16u}, std::pair{96u, 4u}}) {
          const std::vector<std::byte> rows = Rows(layout, tokens, kv, l, p, first, count);
          expected.insert(expected.end(), rows.begin(), rows.end());
        }
        EXPECT_EQ(Rows(layout, 36, kept->payload, l, p, 0, 36), expected) << l << " " << p;
      }
    }
    // The frame: per layer 4 + 4 * 3 bytes of blocks and the kept rows (a ratio of 100 / 36).
    EXPECT_EQ(frame.size(), EncodedFrameOverheadBytes(2) + 2 * (16 + layout.layer_bytes(36)));
  }
}

TEST(TokenDropTest, KeptBlocksAttendAtTheirOwnPositions) {
  // The kept tokens' attention, read from DecodeKept's payload with its block positions, equals
  // the original chunk's attention over those blocks at their places: the same keys rotated at
  // the same positions (the chunk starts at 512 in its prompt).
  const KvLayout layout = NopeLayout(KvDtype::kFloat32, 1, 2, 64, 128);
  const std::vector<std::byte> kv = MakeKv(layout, 128, KvShape::kShaped, 11);
  std::vector<float> importance(128);
  std::mt19937 rng(4);
  for (float& x : importance) x = std::uniform_real_distribution<float>(0, 1)(rng);
  const TokenDropCodec& h2o = Drop("drop_h2o");
  const std::vector<std::byte> frame = EncodeOrDie(
      h2o, layout, 128, kv, {.recent_tokens = 32, .heavy_tokens = 16, .importance = importance});
  absl::StatusOr<KeptTokens> kept = h2o.DecodeKept(layout, frame);
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->blocks.size(), 4u);  // the sink, 2 recent and 1 heavy (16 tokens each)

  absl::StatusOr<kernels::RopeTable> rope =
      kernels::RopeTable::Create({.rotary_dim = 64, .max_position = 1024});
  ASSERT_TRUE(rope.ok()) << rope.status();
  const int64_t heads = 2, dim = 64, n = 4, start = 512;
  std::vector<float> q(n * heads * dim);
  std::normal_distribution<float> normal;
  for (float& x : q) x = normal(rng);
  const std::vector<int64_t> query_positions = {640, 641, 642, 643};
  const int32_t seq_lens[] = {64}, query_start_loc[] = {0, static_cast<int32_t>(n)};

  const auto attend = [&](std::span<const std::byte> chunk, uint32_t tokens,
                          std::span<const int32_t> table, std::span<const int64_t> positions) {
    std::vector<std::byte> k(chunk.begin(), chunk.begin() + layout.plane_offset(0, 1, tokens));
    std::vector<std::byte> v(chunk.begin() + layout.plane_offset(0, 1, tokens), chunk.end());
    const int64_t blocks = tokens / 16, extent = tokens * heads * dim;
    std::vector<float> out(q.size());
    const kernels::PagedAttentionArgs args{
        .q = kernels::ConstHeadsView::Dense(q.data(), KvDtype::kFloat32, n, heads, dim),
        .out = kernels::HeadsView::Dense(out.data(), KvDtype::kFloat32, n, heads, dim),
        .kv_spec = kernels::PagedKvSpec::Contiguous(KvDtype::kFloat32, 2, blocks, 16, heads, dim),
        .kv = kernels::PagedKvLayer::FromSeparatePlanes(k.data(), extent, v.data(), extent),
        .block_table = table,
        .max_blocks_per_seq = 4,
        .seq_lens = seq_lens,
        .query_start_loc = query_start_loc,
        .query_positions = query_positions,
        .block_positions = positions,
        .rope = rope->view(),
        .causal = false};
    const absl::Status status = kernels::PagedAttention(args);
    EXPECT_TRUE(status.ok()) << status;
    return out;
  };
  std::vector<int64_t> positions = kept->BlockPositions();
  for (int64_t& p : positions) p += start;
  const int32_t kept_table[] = {0, 1, 2, 3};
  std::vector<int32_t> original_table(kept->blocks.begin(), kept->blocks.end());
  const std::vector<float> from_frame = attend(kept->payload, 64, kept_table, positions);
  EXPECT_EQ(from_frame, attend(kv, 128, original_table, positions));
  // Read at the wrong positions (as if the kept blocks were consecutive), the output differs.
  const std::vector<int64_t> packed = {start, start + 16, start + 32, start + 48};
  EXPECT_NE(from_frame, attend(kept->payload, 64, kept_table, packed));
}

TEST(TokenDropTest, RopeAppliedKvAndBadParametersAreRefused) {
  KvLayout rope = NopeLayout(KvDtype::kBfloat16);
  rope.positional = PositionalFormat::kRopeApplied;
  const std::vector<std::byte> kv = MakeKv(rope, 128, KvShape::kShaped, 1);
  const std::vector<float> importance(128, 1.0f);
  for (const auto& [name, params] :
       {std::pair{"drop_sink_recent", CodecParams{}},
        std::pair{"drop_h2o", CodecParams{.importance = importance}}}) {
    const Codec& codec = **CodecRegistry::Find(name);
    const absl::Status encoded = codec.Encode(rope, 128, kv, params).status();
    EXPECT_EQ(encoded.code(), kPrecondition) << name;
    EXPECT_THAT(encoded.message(), HasSubstr("positional=nope")) << name;
    EXPECT_EQ(codec.CheckParams(rope, params).code(), kPrecondition) << name;
  }

  const KvLayout layout = NopeLayout(KvDtype::kBfloat16);
  const std::vector<float> short_importance(100, 1.0f);
  std::vector<float> nan_importance(128, 1.0f), negative_importance(128, 1.0f);
  nan_importance[7] = std::numeric_limits<float>::quiet_NaN();
  negative_importance[9] = -1.0f;
  const struct {
    const char* codec;
    CodecParams params;
  } bad[] = {
      {"drop_sink_recent", {.group_size = 48}},  // does not divide 128
      {"drop_sink_recent", {.bits = 4}},
      {"drop_sink_recent", {.energy = 0.5f}},
      {"drop_sink_recent", {.heavy_tokens = 16}},
      {"drop_sink_recent", {.importance = importance}},
      {"drop_h2o", {}},  // no importance
      {"drop_h2o", {.importance = short_importance}},
      {"drop_h2o", {.importance = nan_importance}},
      {"drop_h2o", {.importance = negative_importance}},
  };
  for (const auto& [name, params] : bad) {
    EXPECT_EQ(Drop(name).Encode(layout, 128, kv, params).status().code(), kInvalid) << name;
  }
  EXPECT_EQ(Drop("drop_h2o").Encode(layout, 0, {}, {.importance = importance}).status().code(),
            kInvalid);
  // The codecs that keep every token take none of the token-dropping parameters.
  for (const Codec* codec : CodecRegistry::All()) {
    if (codec->drops_tokens()) continue;
    for (const CodecParams& params :
         {CodecParams{.sink_tokens = 16}, CodecParams{.recent_tokens = 16},
          CodecParams{.heavy_tokens = 16}, CodecParams{.importance = importance}}) {
      EXPECT_EQ(codec->CheckParams(layout, params).code(), kInvalid) << codec->name();
    }
  }
}

TEST(TokenDropTest, FramesWhoseLayersDisagreeOrWhoseBlocksAreOutOfOrderAreDataLoss) {
  const KvLayout layout = NopeLayout(KvDtype::kBfloat16);
  const std::vector<std::byte> kv = MakeKv(layout, 128, KvShape::kShaped, 2);
  const TokenDropCodec& codec = Drop("drop_sink_recent");
  const std::vector<std::byte> frame = EncodeOrDie(codec, layout, 128, kv);
  absl::StatusOr<EncodedChunk> chunk = EncodedChunk::Parse(frame);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  const auto rewrite = [&](uint32_t layer, uint32_t word, uint32_t value) {
    std::vector<std::vector<std::byte>> sections;
    for (uint32_t l = 0; l < layout.num_layers; ++l) {
      sections.emplace_back(chunk->section(l).begin(), chunk->section(l).end());
    }
    std::memcpy(sections[layer].data() + 4 * word, &value, 4);
    return EncodedChunkWriter::Assemble(chunk->header(), sections);
  };
  // Blocks 0, 7 (the default: 16 recent tokens): layer 1 claims 0, 6 instead.
  EXPECT_EQ(codec.DecodeKept(layout, rewrite(1, 2, 6)).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(codec.DecodeKept(layout, rewrite(0, 2, 0)).status().code(),
            absl::StatusCode::kDataLoss);  // out of order
  EXPECT_EQ(codec.DecodeKept(layout, rewrite(0, 2, 8)).status().code(),
            absl::StatusCode::kDataLoss);  // beyond the chunk
  EXPECT_EQ(codec.DecodeKept(layout, rewrite(0, 0, 3)).status().code(),
            absl::StatusCode::kDataLoss);                        // a count the rows do not match
  EXPECT_TRUE(codec.DecodeKept(layout, rewrite(0, 2, 7)).ok());  // itself, rewritten
}

TEST(TokenDropTest, AFrameThatKeptNoBlockIsDataLoss) {
  const KvLayout layout = NopeLayout(KvDtype::kBfloat16);
  const std::vector<std::byte> kv = MakeKv(layout, 128, KvShape::kShaped, 2);
  const TokenDropCodec& codec = Drop("drop_sink_recent");
  const std::vector<std::byte> frame = EncodeOrDie(codec, layout, 128, kv);
  absl::StatusOr<EncodedChunk> chunk = EncodedChunk::Parse(frame);
  ASSERT_TRUE(chunk.ok()) << chunk.status();
  // Every layer's section says it kept no block, and holds no rows: consistent, but no encoder
  // writes it (the sink block is always kept).
  const std::vector<std::vector<std::byte>> sections(layout.num_layers, std::vector<std::byte>(4));
  const std::vector<std::byte> none = EncodedChunkWriter::Assemble(chunk->header(), sections);
  const absl::StatusOr<KeptTokens> kept = codec.DecodeKept(layout, none);
  EXPECT_EQ(kept.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(kept.status().message(), HasSubstr("0 kept blocks"));
}

}  // namespace
}  // namespace strata::storage
