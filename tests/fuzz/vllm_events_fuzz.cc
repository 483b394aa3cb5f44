// Fuzzes the controller's reading of a plain vLLM engine's ZMQ KV events (controller/ingest:
// DecodeVllmEventBatch, then VllmKeyTranslator), bytes that come from the network.
//
// Input: byte 0 picks the key protocol (bit 0: sha256_cbor, which checks the engine's hashes;
// else xxh3_128) and the block size (bits 1-2: 1, 4, 16 or 64 tokens); the rest is the payload.
// The payload is decoded twice, each time into a translator that already holds what the first
// decode taught it, so parents and removals resolve.
//
// Invariants: decoding answers OK or kInvalidArgument; a decoded BlockStored holds block_size
// tokens per hash; a translation makes at most one index event per stored or removed hash and
// per clear, each with a non-empty key unless it is a kCleared, and the translator's counters add
// up to what it was given.
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "controller/ingest/vllm_events.h"
#include "controller/ingest/vllm_key_translator.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using strata::controller::ChunkEvent;
using strata::controller::ChunkEventKind;

uint64_t BlocksIn(const strata::controller::VllmEventBatch& batch) {
  uint64_t blocks = 0;
  for (const auto& event : batch.events) {
    if (const auto* stored = std::get_if<strata::controller::VllmBlockStored>(&event)) {
      FUZZ_CHECK(stored->token_ids.size() == stored->block_hashes.size() * stored->block_size);
      blocks += stored->block_hashes.size();
    } else if (const auto* removed = std::get_if<strata::controller::VllmBlockRemoved>(&event)) {
      blocks += removed->block_hashes.size();
    } else {
      ++blocks;
    }
  }
  return blocks;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  strata::KvLayout layout;
  layout.model_id = "fuzz";
  layout.num_layers = 1;
  layout.num_kv_heads = 1;
  layout.head_dim = 8;
  layout.chunk_tokens = uint32_t{1} << (2 * ((data[0] >> 1) & 3));
  const strata::HashAlgorithm algorithm =
      (data[0] & 1) != 0 ? strata::HashAlgorithm::kSha256Cbor : strata::HashAlgorithm::kXxh3_128;
  absl::StatusOr<strata::KeyHasher> hasher =
      strata::KeyHasher::Create(layout, {.algorithm = algorithm, .seed = "0"});
  FUZZ_CHECK(hasher.ok());
  strata::controller::VllmKeyTranslator translator(*std::move(hasher));

  const std::span<const std::byte> payload(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<strata::controller::VllmEventBatch> batch =
        strata::controller::DecodeVllmEventBatch(payload);
    if (!batch.ok()) {
      FUZZ_CHECK(batch.status().code() == absl::StatusCode::kInvalidArgument);
      return 0;
    }
    const uint64_t blocks = BlocksIn(*batch);
    const strata::controller::VllmTranslateStats before = translator.stats();
    std::vector<ChunkEvent> events;
    translator.Translate(*batch, events);
    FUZZ_CHECK(events.size() <= blocks);
    for (const ChunkEvent& event : events) {
      FUZZ_CHECK(event.kind == ChunkEventKind::kCleared || !event.key.empty());
    }
    const strata::controller::VllmTranslateStats& after = translator.stats();
    const uint64_t accounted = (after.stored_blocks - before.stored_blocks) +
                               (after.removed_blocks - before.removed_blocks) +
                               (after.clears - before.clears);
    FUZZ_CHECK(accounted == events.size());
    const uint64_t skipped = (after.unknown_parent - before.unknown_parent) +
                             (after.unkeyable - before.unkeyable) +
                             (after.hash_mismatches - before.hash_mismatches);
    FUZZ_CHECK(accounted + skipped <= blocks);
  }
  return 0;
}
