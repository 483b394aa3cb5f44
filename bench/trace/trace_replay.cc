#include "bench/trace/trace_replay.h"

#include <chrono>
#include <cstring>

#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "storage/host/host_tier.h"

namespace strata::bench {
namespace {

constexpr uint32_t kPageBytes = 4096;

// 1 layer, 1 head of dim 2, bf16: 8 bytes a token, one page per 512-token block.
KvLayout ReplayLayout() {
  return {.model_id = "trace-replay",
          .num_layers = 1,
          .num_kv_heads = 1,
          .head_dim = 2,
          .dtype = KvDtype::kBfloat16,
          .chunk_tokens = kTraceBlockTokens};
}

ChunkKey BlockKey(const KvLayout& layout, uint64_t block) {
  std::array<uint8_t, 16> digest{};
  std::memcpy(digest.data(), &block, sizeof(block));
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, layout.Fingerprint(),
                             digest);
}

// The payload a block's chunk holds: its id repeated.
void FillPayload(const storage::MutablePayloadView& payload, uint64_t block) {
  for (size_t r = 0; r < payload.ranges().size(); ++r) {
    std::span<std::byte> bytes = payload.range_bytes(r);
    for (size_t at = 0; at + sizeof(block) <= bytes.size(); at += sizeof(block)) {
      std::memcpy(bytes.data() + at, &block, sizeof(block));
    }
  }
}

bool PayloadHolds(const storage::PayloadView& payload, uint64_t block) {
  uint64_t first = 0;
  std::memcpy(&first, payload.range_bytes(0).data(), sizeof(first));
  return first == block;
}

}  // namespace

absl::StatusOr<ReplayResult> ReplayOnHostTier(const Trace& trace, const ReplayOptions& options) {
  if (options.capacity_blocks == 0) {
    return absl::InvalidArgumentError("trace replay needs a capacity of at least one block");
  }
  const KvLayout layout = ReplayLayout();
  STRATA_RETURN_IF_ERROR(layout.Validate());
  ReplayResult result;
  result.capacity_bytes = options.capacity_blocks * kPageBytes;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<storage::HostTier> tier,
                          storage::HostTier::Create({.capacity_bytes = result.capacity_bytes,
                                                     .page_bytes = kPageBytes,
                                                     .arena_name = "strata-trace-replay",
                                                     .hard_pin_quota_bytes = 0,
                                                     .policy = options.policy}));
  const auto start = std::chrono::steady_clock::now();
  std::vector<ChunkKey> keys;
  for (const TraceRequest& request : trace.requests) {
    keys.clear();
    for (uint64_t block : request.blocks) keys.push_back(BlockKey(layout, block));
    result.total_blocks += keys.size();
    STRATA_ASSIGN_OR_RETURN(storage::PrefixLeases prefix, tier->AcquirePrefix(keys));
    if (prefix.data_loss_chunks != 0) return absl::DataLossError("checksum failure in replay");
    for (size_t i = 0; i < prefix.leases.size(); ++i) {
      const storage::ChunkLease& lease = prefix.leases[i];
      if (!PayloadHolds(lease.payload(), request.blocks[i])) ++result.wrong_payloads;
      result.bytes_read += lease.size_bytes();
    }
    result.hit_blocks += prefix.leases.size();
    for (size_t i = prefix.leases.size(); i < keys.size(); ++i) {
      const bool last = i + 1 == keys.size();
      const bool partial = last && request.last_block_partial();
      const uint32_t tokens =
          partial ? request.input_tokens % kTraceBlockTokens : kTraceBlockTokens;
      absl::StatusOr<storage::ReserveResult> reserved = tier->Reserve(
          layout, keys[i],
          {.num_tokens = tokens, .parent = i == 0 ? ChunkKey() : keys[i - 1], .partial = partial});
      if (absl::IsResourceExhausted(reserved.status())) {
        ++result.rejected_stores;
        continue;
      }
      STRATA_RETURN_IF_ERROR(reserved.status());
      if (reserved->outcome != storage::ReserveOutcome::kReserved) continue;
      FillPayload(reserved->reservation.payload(), request.blocks[i]);
      result.bytes_written += reserved->reservation.size_bytes();
      STRATA_RETURN_IF_ERROR(tier->Commit(std::move(reserved->reservation)));
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.evictions = tier->Stats().evictions;
  STRATA_RETURN_IF_ERROR(tier->CheckConsistency());
  return result;
}

}  // namespace strata::bench
