#include "controller/ingest/vllm_events.h"

#include <msgpack.h>

#include <string>
#include <variant>

#include "controller/ingest/testing/vllm_batch_writer.h"
#include "gtest/gtest.h"

namespace strata::controller {
namespace {

using testing::VllmBatchWriter;

absl::StatusOr<VllmEventBatch> Decode(const std::string& payload) {
  return DecodeVllmEventBatch(std::as_bytes(std::span(payload.data(), payload.size())));
}

EngineBlockHash IntHash(uint64_t value) {
  EngineBlockHash hash(9, 'i');
  for (int i = 0; i < 8; ++i) hash[1 + i] = static_cast<char>(value >> (56 - 8 * i));
  return hash;
}

TEST(VllmEventsTest, DecodesEachEventTypeAndCountsUnknownOnes) {
  const std::string payload =
      VllmBatchWriter()
          .Add({.hashes = {11, 12}, .tokens = {1, 2, 3, 4, 5, 6, 7, 8}, .block_size = 4})
          .Add({.hashes = {13},
                .parent = 12,
                .tokens = {9, 10, 11, 12},
                .block_size = 4,
                .medium = "CPU",
                .lora_id = true,
                .lora_name = "adapter",
                .group_idx = 2})
          .Unknown()
          .Removed({11}, "CPU")
          .Cleared()
          .Payload();
  absl::StatusOr<VllmEventBatch> batch = Decode(payload);
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_DOUBLE_EQ(batch->timestamp, 1.5e9);
  EXPECT_EQ(batch->unknown_events, 1u);
  ASSERT_EQ(batch->events.size(), 4u);

  const auto& first = std::get<VllmBlockStored>(batch->events[0]);
  EXPECT_EQ(first.block_hashes, (std::vector<EngineBlockHash>{IntHash(11), IntHash(12)}));
  EXPECT_FALSE(first.parent.has_value());
  EXPECT_EQ(first.token_ids, (std::vector<uint32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(first.block_size, 4u);
  EXPECT_EQ(first.medium, "GPU");
  EXPECT_FALSE(first.has_lora_id);
  EXPECT_FALSE(first.lora_name.has_value());
  EXPECT_FALSE(first.has_extra_keys);
  EXPECT_EQ(first.group_idx, 0u);

  const auto& second = std::get<VllmBlockStored>(batch->events[1]);
  EXPECT_EQ(second.parent, IntHash(12));
  EXPECT_EQ(second.medium, "CPU");
  EXPECT_TRUE(second.has_lora_id);
  EXPECT_EQ(second.lora_name, "adapter");
  EXPECT_EQ(second.group_idx, 2u);

  const auto& removed = std::get<VllmBlockRemoved>(batch->events[2]);
  EXPECT_EQ(removed.block_hashes, std::vector<EngineBlockHash>{IntHash(11)});
  EXPECT_EQ(removed.medium, "CPU");
  EXPECT_TRUE(std::holds_alternative<VllmAllBlocksCleared>(batch->events[3]));
}

TEST(VllmEventsTest, ExtraKeysAreNoticed) {
  absl::StatusOr<VllmEventBatch> batch =
      Decode(VllmBatchWriter()
                 .Add({.hashes = {1}, .tokens = {1, 2}, .block_size = 2, .extra_keys = true})
                 .Payload());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(std::get<VllmBlockStored>(batch->events[0]).has_extra_keys);
}

// Byte digests, negative integers (Python's builtin hash) and a nil medium.
TEST(VllmEventsTest, ByteAndNegativeHashes) {
  msgpack_sbuffer buffer;
  msgpack_sbuffer_init(&buffer);
  msgpack_packer p;
  msgpack_packer_init(&p, &buffer, msgpack_sbuffer_write);
  msgpack_pack_array(&p, 2);
  msgpack_pack_uint64(&p, 7);  // an integer timestamp
  msgpack_pack_array(&p, 1);
  msgpack_pack_array(&p, 3);
  msgpack_pack_str(&p, 12);
  msgpack_pack_str_body(&p, "BlockRemoved", 12);
  msgpack_pack_array(&p, 2);
  msgpack_pack_bin(&p, 3);
  msgpack_pack_bin_body(&p, "abc", 3);
  msgpack_pack_int64(&p, -2);
  msgpack_pack_nil(&p);
  const std::string payload(buffer.data, buffer.size);
  msgpack_sbuffer_destroy(&buffer);

  absl::StatusOr<VllmEventBatch> batch = Decode(payload);
  ASSERT_TRUE(batch.ok()) << batch.status();
  const auto& removed = std::get<VllmBlockRemoved>(batch->events[0]);
  EXPECT_EQ(removed.block_hashes,
            (std::vector<EngineBlockHash>{"babc", IntHash(0xfffffffffffffffeull)}));
  EXPECT_EQ(removed.medium, "");
}

TEST(VllmEventsTest, MalformedPayloadsAreInvalidArguments) {
  const std::string good =
      VllmBatchWriter().Add({.hashes = {1}, .tokens = {1, 2}, .block_size = 2}).Payload();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"not msgpack", "\xc1"},
      {"truncated", good.substr(0, good.size() - 1)},
      {"trailing bytes", good + "\x01"},
      {"not an array", "\x01"},
      {"too short", "\x91\x01"},
      {"ts a string", "\x92\xa1x\x90"},
      {"events not an array", "\x92\x01\x01"},
      {"an event not an array", "\x92\x01\x91\x01"},
      {"an untagged event", "\x92\x01\x91\x91\x01"},
      // An array header that claims 2^32 - 1 elements, in five bytes.
      {"a collection longer than the payload", "\x92\x01\xdd\xff\xff\xff\xff"},
      {"a map longer than the payload", "\x92\x01\xdf\xff\xff\xff\xff"},
  };
  for (const auto& [name, payload] : cases) {
    absl::StatusOr<VllmEventBatch> batch = Decode(payload);
    EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument) << name;
  }
  // Wrong token count, a zero block size, a hash of another type.
  for (const std::string& payload : {
           VllmBatchWriter().Add({.hashes = {1, 2}, .tokens = {1, 2}, .block_size = 2}).Payload(),
           VllmBatchWriter().Add({.hashes = {}, .tokens = {}, .block_size = 0}).Payload(),
       }) {
    EXPECT_EQ(Decode(payload).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace strata::controller
