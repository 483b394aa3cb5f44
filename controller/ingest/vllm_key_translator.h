// VllmKeyTranslator turns one plain vLLM engine's KV events (vllm_events.h) into the cluster
// index's events (chunk_event.h), keyed by the chunk keys routers ask about.
//
// An engine's block hashes are not Strata's keys (its default hash is Python's; even its
// sha256_cbor chain reaches the events only as 64-bit ids), so, as llm-d does, the translator
// computes each stored block's key itself: KeyHasher::NextPrefixKey over the block's token ids
// and its parent's key, with the controller's key protocol and the engine's layout (whose
// chunk_tokens is the engine's block size). It remembers each block hash's key and the tiers
// that hold it, to resolve the parents of later blocks and the hashes of removals. It skips,
// counting each, the blocks it cannot key exactly as a router's lookup would:
//   - a block whose parent hash it never saw (it joined the stream late, or forgot the parent
//     after a Reset), and the rest of its event's chain;
//   - blocks of another size than the layout's chunk, of a KV cache group other than 0, with
//     extra keys (multimodal inputs, a cache salt) or with a LoRA adapter not named by lora_name;
//   - blocks in a medium it does not know (GPU or nil: the device tier; CPU: host; disk: disk);
//   - with the sha256_cbor key protocol, a block whose computed key does not match the engine's
//     hash (its EventId for an integer hash, its digest for bytes), and the rest of its chain:
//     the engine hashed something the events do not show.
// Removing a block the translator does not know is no error (it may predate the stream). A
// block's hash is forgotten once no tier holds it.
//
// Thread-compatible: one feed's thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "controller/index/chunk_event.h"
#include "controller/ingest/vllm_events.h"
#include "core/key_hasher.h"

namespace strata::controller {

struct VllmTranslateStats {
  uint64_t stored_blocks = 0;    // kStored events made
  uint64_t removed_blocks = 0;   // kRemoved events made
  uint64_t clears = 0;           // AllBlocksCleared events
  uint64_t unknown_parent = 0;   // blocks skipped: the parent was never seen
  uint64_t unkeyable = 0;        // blocks skipped: size, group, extra keys, unnamed LoRA, medium
  uint64_t hash_mismatches = 0;  // blocks skipped: sha256_cbor keys that disagree with the engine
};

class VllmKeyTranslator {
 public:
  // `hasher` carries the engine's layout and the controller's key protocol.
  explicit VllmKeyTranslator(KeyHasher hasher) : hasher_(std::move(hasher)) {}

  // Appends the index events of `batch` to `out`, in order (AllBlocksCleared as kCleared).
  void Translate(const VllmEventBatch& batch, std::vector<ChunkEvent>& out);
  // Forgets every block hash (after a gap in the stream, whose events are unknown).
  void Reset() { blocks_.clear(); }

  size_t known_blocks() const { return blocks_.size(); }
  const VllmTranslateStats& stats() const { return stats_; }

 private:
  struct Block {
    ChunkKey key;
    uint8_t tiers = 0;  // bit i: Tier(i) holds it
  };

  void Stored(const VllmBlockStored& event, std::vector<ChunkEvent>& out);
  void Removed(const VllmBlockRemoved& event, std::vector<ChunkEvent>& out);
  // Whether `key` is what the engine's `hash` says, where the key protocol allows the check.
  bool Matches(const EngineBlockHash& hash, const ChunkKey& key) const;

  const KeyHasher hasher_;
  absl::flat_hash_map<EngineBlockHash, Block> blocks_;
  VllmTranslateStats stats_;
};

// The tier a vLLM medium names: "" or "GPU" the device, "CPU" the host, "DISK" the disk (any
// case); nullopt for others.
std::optional<Tier> VllmMediumTier(std::string_view medium);

}  // namespace strata::controller
