#include "controller/ingest/vllm_key_translator.h"

#include <string>
#include <vector>

#include "controller/ingest/testing/vllm_batch_writer.h"
#include "gtest/gtest.h"
#include "tests/support/test_layout.h"

namespace strata::controller {
namespace {

using testing::VllmBatchWriter;

KvLayout Layout() {
  return test_support::SmallLayout(
      {.model_id = "m", .num_layers = 2, .num_kv_heads = 2, .head_dim = 4, .chunk_tokens = 4});
}

KeyHasher Hasher(HashAlgorithm algorithm = HashAlgorithm::kXxh3_128) {
  return *KeyHasher::Create(Layout(), {.algorithm = algorithm, .seed = "0"});
}

VllmEventBatch Batch(const VllmBatchWriter& writer) {
  const std::string payload = writer.Payload();
  return *DecodeVllmEventBatch(std::as_bytes(std::span(payload.data(), payload.size())));
}

std::vector<ChunkEvent> Translate(VllmKeyTranslator& translator, const VllmBatchWriter& writer) {
  std::vector<ChunkEvent> events;
  translator.Translate(Batch(writer), events);
  return events;
}

const std::vector<uint32_t> kTokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

// The keys a router's lookup computes for the same tokens equal the translated ones, across
// events chained by their parent hash.
TEST(VllmKeyTranslatorTest, KeysAreTheRoutersKeysAcrossEvents) {
  VllmKeyTranslator translator(Hasher());
  const std::vector<ChunkKey> expected = Hasher().PrefixKeys(kTokens, {});
  ASSERT_EQ(expected.size(), 3u);

  std::vector<ChunkEvent> events = Translate(
      translator,
      VllmBatchWriter()
          .Add({.hashes = {100, 101}, .tokens = {1, 2, 3, 4, 5, 6, 7, 8}, .block_size = 4})
          .Add({.hashes = {102},
                .parent = 101,
                .tokens = {9, 10, 11, 12},
                .block_size = 4,
                .medium = "cpu"}));
  ASSERT_EQ(events.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(events[i].kind, ChunkEventKind::kStored);
    EXPECT_EQ(events[i].key, expected[i]) << i;
  }
  EXPECT_EQ(events[0].tier, Tier::kDevice);
  EXPECT_EQ(events[2].tier, Tier::kHost);
  EXPECT_EQ(translator.stats().stored_blocks, 3u);
  EXPECT_EQ(translator.known_blocks(), 3u);

  // A removal names the key by the engine's hash; a hash no tier holds is forgotten.
  events = Translate(translator, VllmBatchWriter().Removed({102}, "CPU").Removed({999}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ChunkEventKind::kRemoved);
  EXPECT_EQ(events[0].tier, Tier::kHost);
  EXPECT_EQ(events[0].key, expected[2]);
  EXPECT_EQ(translator.known_blocks(), 2u);

  events = Translate(translator, VllmBatchWriter().Cleared());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, ChunkEventKind::kCleared);
  EXPECT_EQ(translator.known_blocks(), 0u);
  EXPECT_EQ(translator.stats().clears, 1u);
}

TEST(VllmKeyTranslatorTest, BlockInTwoTiersIsKeptUntilBothRemoveIt) {
  VllmKeyTranslator translator(Hasher());
  Translate(translator,
            VllmBatchWriter()
                .Add({.hashes = {1}, .tokens = {1, 2, 3, 4}, .block_size = 4})
                .Add({.hashes = {1}, .tokens = {1, 2, 3, 4}, .block_size = 4, .medium = "CPU"}));
  Translate(translator, VllmBatchWriter().Removed({1}, "GPU"));
  EXPECT_EQ(translator.known_blocks(), 1u);
  // Its child still resolves through it.
  std::vector<ChunkEvent> events = Translate(
      translator,
      VllmBatchWriter().Add({.hashes = {2}, .parent = 1, .tokens = {5, 6, 7, 8}, .block_size = 4}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].key, Hasher().PrefixKeys(kTokens, {})[1]);
  Translate(translator, VllmBatchWriter().Removed({1}, "CPU"));
  EXPECT_EQ(translator.known_blocks(), 1u);  // the child
}

TEST(VllmKeyTranslatorTest, BlocksItCannotKeyAreSkippedAndCounted) {
  VllmKeyTranslator translator(Hasher());
  std::vector<ChunkEvent> events = Translate(
      translator,
      VllmBatchWriter()
          // A parent never seen.
          .Add({.hashes = {5, 6}, .parent = 4, .tokens = {1, 2, 3, 4, 5, 6, 7, 8}, .block_size = 4})
          // Another block size, group, extra keys, an unnamed LoRA, an unknown medium.
          .Add({.hashes = {7}, .tokens = {1, 2}, .block_size = 2})
          .Add({.hashes = {8}, .tokens = {1, 2, 3, 4}, .block_size = 4, .group_idx = 1})
          .Add({.hashes = {9}, .tokens = {1, 2, 3, 4}, .block_size = 4, .extra_keys = true})
          .Add({.hashes = {10}, .tokens = {1, 2, 3, 4}, .block_size = 4, .lora_id = true})
          .Add({.hashes = {11}, .tokens = {1, 2, 3, 4}, .block_size = 4, .medium = "tape"})
          .Removed({11}, "tape"));
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(translator.stats().unknown_parent, 2u);
  EXPECT_EQ(translator.stats().unkeyable, 6u);
  EXPECT_EQ(translator.known_blocks(), 0u);
}

TEST(VllmKeyTranslatorTest, NamedLoraEntersTheKey) {
  VllmKeyTranslator translator(Hasher());
  std::vector<ChunkEvent> events =
      Translate(translator, VllmBatchWriter().Add({.hashes = {1},
                                                   .tokens = {1, 2, 3, 4},
                                                   .block_size = 4,
                                                   .lora_id = true,
                                                   .lora_name = "sql"}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].key, Hasher().PrefixKeys(kTokens, {.lora_name = "sql"})[0]);
  EXPECT_NE(events[0].key, Hasher().PrefixKeys(kTokens, {})[0]);
}

// With vLLM's own key protocol the engine's hashes are checked: a block whose hash disagrees
// (the engine hashed more than its tokens) is skipped with the rest of its chain.
TEST(VllmKeyTranslatorTest, Sha256CborHashesAreChecked) {
  const std::vector<ChunkKey> keys = Hasher(HashAlgorithm::kSha256Cbor).PrefixKeys(kTokens, {});
  VllmKeyTranslator translator(Hasher(HashAlgorithm::kSha256Cbor));
  std::vector<ChunkEvent> events = Translate(
      translator, VllmBatchWriter().Add(
                      {.hashes = {keys[0].EventId(), keys[1].EventId() ^ 1, keys[2].EventId()},
                       .tokens = kTokens,
                       .block_size = 4}));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].key, keys[0]);
  EXPECT_EQ(translator.stats().hash_mismatches, 2u);
}

TEST(VllmKeyTranslatorTest, MediumNames) {
  EXPECT_EQ(VllmMediumTier(""), Tier::kDevice);
  EXPECT_EQ(VllmMediumTier("GPU"), Tier::kDevice);
  EXPECT_EQ(VllmMediumTier("cpu"), Tier::kHost);
  EXPECT_EQ(VllmMediumTier("Disk"), Tier::kDisk);
  EXPECT_EQ(VllmMediumTier("tape"), std::nullopt);
}

}  // namespace
}  // namespace strata::controller
