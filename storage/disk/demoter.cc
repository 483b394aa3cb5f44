#include "storage/disk/demoter.h"

#include <span>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "core/status_macros.h"
#include "fmt/format.h"

namespace strata::storage {

absl::InlinedVector<std::span<const std::byte>, 4> PayloadParts(const PayloadView& payload) {
  absl::InlinedVector<std::span<const std::byte>, 4> parts;
  for (size_t i = 0; i < payload.ranges().size(); ++i) parts.push_back(payload.range_bytes(i));
  return parts;
}

absl::Status PutPayload(DiskTier& disk, const ChunkKey& key, const PayloadView& payload,
                        uint64_t checksum, uint32_t num_tokens) {
  return disk.Put(key, key.layout_fingerprint(), PayloadParts(payload), checksum, num_tokens);
}

absl::StatusOr<bool> CopyToDisk(HostTier& host, DiskTier& disk, const ChunkKey& key) {
  STRATA_ASSIGN_OR_RETURN(std::optional<ChunkLease> lease, host.AcquireForCopy(key));
  if (!lease.has_value()) return false;
  STRATA_RETURN_IF_ERROR(
      PutPayload(disk, key, lease->payload(), lease->checksum(), lease->num_tokens()));
  return true;
}

namespace {

// Promotes `key` (`payload_bytes` of `num_tokens` tokens, found `where`): checks the size against
// `layout`, reserves the chunk in the host tier, has `fill` write the reserved pages and commits
// them with `checksum`. The reservation is aborted when `fill` fails.
absl::StatusOr<PromoteOutcome> ReserveFillCommit(
    HostTier& host, const KvLayout& layout, const ChunkKey& key, uint64_t payload_bytes,
    uint32_t num_tokens, uint64_t checksum, std::string_view where,
    absl::FunctionRef<absl::Status(const MutablePayloadView&)> fill) {
  if (num_tokens == 0 || layout.chunk_bytes(num_tokens) != payload_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("promote {}: {} bytes {} for {} tokens of a layout of {} bytes each",
                    key.ToString(), payload_bytes, where, num_tokens, layout.bytes_per_token()));
  }
  STRATA_ASSIGN_OR_RETURN(ReserveResult reserved,
                          host.Reserve(layout, key, {.num_tokens = num_tokens, .reused = true}));
  switch (reserved.outcome) {
    case ReserveOutcome::kAlreadyPresent:
      return PromoteOutcome::kAlreadyInHost;
    case ReserveOutcome::kInProgress:
      return PromoteOutcome::kInProgress;
    case ReserveOutcome::kReserved:
      break;
  }
  if (absl::Status status = fill(reserved.reservation.payload()); !status.ok()) {
    host.Abort(std::move(reserved.reservation));
    return status;
  }
  STRATA_RETURN_IF_ERROR(host.Commit(std::move(reserved.reservation), checksum));
  return PromoteOutcome::kPromoted;
}

}  // namespace

absl::StatusOr<PromoteOutcome> PromoteFromDisk(DiskTier& disk, HostTier& host,
                                               const KvLayout& layout, const ChunkKey& key,
                                               const DiskMover* staged) {
  if (staged != nullptr) {
    // Held alive by this pointer while it is copied, even if its write finishes meanwhile. The
    // host tier takes the checksum it gave the chunk when it was first committed.
    if (std::shared_ptr<const StagedPayload> payload = staged->FindStaged(key)) {
      return ReserveFillCommit(host, layout, key, payload->payload_bytes, payload->num_tokens,
                               payload->checksum, "staged for disk",
                               [&](const MutablePayloadView& pages) {
                                 pages.CopyFrom(payload->payload());
                                 return absl::OkStatus();
                               });
    }
  }
  const std::optional<DiskChunkInfo> info = disk.Lookup(key);
  if (!info.has_value()) return PromoteOutcome::kNotOnDisk;
  // Read checks the bytes against the record's checksum as they arrive, so the host tier takes
  // it instead of digesting the chunk again. Keys name their content, so a record that replaced
  // the looked-up one carries the same checksum; if it did not, verified host loads of the chunk
  // would fail (kDataLoss), never serve it.
  return ReserveFillCommit(host, layout, key, info->payload_bytes, info->num_tokens,
                           info->payload_checksum, "on disk", [&](const MutablePayloadView& pages) {
                             absl::InlinedVector<std::span<std::byte>, 4> parts;
                             for (size_t i = 0; i < pages.ranges().size(); ++i) {
                               parts.push_back(pages.range_bytes(i));
                             }
                             return disk.Read(key, parts);
                           });
}

}  // namespace strata::storage
