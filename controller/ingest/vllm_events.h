// The KV events a plain vLLM engine publishes over ZMQ (vllm/distributed/kv_events.py; the
// format ALGORITHMS.md section 6 describes and daemon/vllm_event_publisher.h emits), decoded
// from one message's msgpack payload: a KVEventBatch [ts, [event, ...], dp_rank?], each event an
// array tagged by its type's name:
//   ["BlockStored", [hash, ...], parent hash or nil, token_ids, block_size, lora_id, medium,
//    lora_name, extra_keys, group_idx]   (the fields after block_size may be absent)
//   ["BlockRemoved", [hash, ...], medium]
//   ["AllBlocksCleared"]
// A hash is an integer (vLLM's default: the digest's last 8 bytes, big-endian) or the digest's
// bytes. Events of other types are counted and skipped (a newer engine may send more); a payload
// that is not such a batch is kInvalidArgument, saying what is wrong, and yields no event.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::controller {

// An engine's block hash as its events carry it, in one comparable form: "i" and the integer's 8
// bytes big-endian, or "b" and the digest's bytes.
using EngineBlockHash = std::string;

struct VllmBlockStored {
  std::vector<EngineBlockHash> block_hashes;
  std::optional<EngineBlockHash> parent;  // nil: the first blocks of a prompt
  std::vector<uint32_t> token_ids;        // block_size tokens per hash, in order
  uint32_t block_size = 0;
  bool has_lora_id = false;              // lora_id was not nil
  std::optional<std::string> lora_name;  // absent or nil: none named
  std::string medium;                    // "" when nil or absent (vLLM's GPU cache)
  bool has_extra_keys = false;           // some block's hash covers more than its tokens
  uint64_t group_idx = 0;                // the KV cache group (hybrid models); 0 when absent
};

struct VllmBlockRemoved {
  std::vector<EngineBlockHash> block_hashes;
  std::string medium;  // "" when nil or absent
};

struct VllmAllBlocksCleared {};

using VllmEvent = std::variant<VllmBlockStored, VllmBlockRemoved, VllmAllBlocksCleared>;

struct VllmEventBatch {
  double timestamp = 0;  // seconds since the Unix epoch, as the engine's clock says
  std::vector<VllmEvent> events;
  uint32_t unknown_events = 0;  // events of a type this decoder does not know, skipped
};

// kInvalidArgument for a payload that is not one msgpack KVEventBatch as above: trailing bytes,
// wrong shapes or types, a token count that is not block_size per hash, a hash of more than 64
// bytes.
absl::StatusOr<VllmEventBatch> DecodeVllmEventBatch(std::span<const std::byte> payload);

}  // namespace strata::controller
