#include "storage/disk/demoter.h"

#include <span>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/status_macros.h"
#include "fmt/format.h"

namespace strata::storage {

absl::Status PutPayload(DiskTier& disk, const ChunkKey& key, const PayloadView& payload,
                        uint64_t checksum, uint32_t num_tokens) {
  absl::InlinedVector<std::span<const std::byte>, 4> parts;
  for (size_t i = 0; i < payload.ranges().size(); ++i) parts.push_back(payload.range_bytes(i));
  return disk.Put(key, key.layout_fingerprint(), parts, checksum, num_tokens);
}

absl::StatusOr<bool> CopyToDisk(HostTier& host, DiskTier& disk, const ChunkKey& key) {
  STRATA_ASSIGN_OR_RETURN(std::optional<ChunkLease> lease, host.Acquire(key));
  if (!lease.has_value()) return false;
  STRATA_RETURN_IF_ERROR(
      PutPayload(disk, key, lease->payload(), lease->checksum(), lease->num_tokens()));
  return true;
}

namespace {

absl::Status CheckSize(const ChunkKey& key, const KvLayout& layout, uint64_t payload_bytes,
                       uint32_t num_tokens, std::string_view where) {
  if (num_tokens == 0 || layout.chunk_bytes(num_tokens) != payload_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("promote {}: {} bytes {} for {} tokens of a layout of {} bytes each",
                    key.ToString(), payload_bytes, where, num_tokens, layout.bytes_per_token()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PromoteOutcome> PromoteStaged(HostTier& host, const KvLayout& layout,
                                             const ChunkKey& key, const StagedPayload& staged) {
  STRATA_RETURN_IF_ERROR(
      CheckSize(key, layout, staged.payload_bytes, staged.num_tokens, "staged for disk"));
  STRATA_ASSIGN_OR_RETURN(ReserveResult reserved,
                          host.Reserve(layout, key, {.num_tokens = staged.num_tokens}));
  switch (reserved.outcome) {
    case ReserveOutcome::kAlreadyPresent:
      return PromoteOutcome::kAlreadyInHost;
    case ReserveOutcome::kInProgress:
      return PromoteOutcome::kInProgress;
    case ReserveOutcome::kReserved:
      break;
  }
  reserved.reservation.payload().CopyFrom(staged.payload());
  STRATA_RETURN_IF_ERROR(host.Commit(std::move(reserved.reservation), staged.checksum));
  return PromoteOutcome::kPromoted;
}

}  // namespace

absl::StatusOr<PromoteOutcome> PromoteFromDisk(DiskTier& disk, HostTier& host,
                                               const KvLayout& layout, const ChunkKey& key,
                                               const DiskMover* staged) {
  if (staged != nullptr) {
    // Held alive by this pointer while it is copied, even if its write finishes meanwhile.
    if (std::shared_ptr<const StagedPayload> payload = staged->FindStaged(key)) {
      return PromoteStaged(host, layout, key, *payload);
    }
  }
  const std::optional<DiskChunkInfo> info = disk.Lookup(key);
  if (!info.has_value()) return PromoteOutcome::kNotOnDisk;
  STRATA_RETURN_IF_ERROR(CheckSize(key, layout, info->payload_bytes, info->num_tokens, "on disk"));
  STRATA_ASSIGN_OR_RETURN(ReserveResult reserved,
                          host.Reserve(layout, key, {.num_tokens = info->num_tokens}));
  switch (reserved.outcome) {
    case ReserveOutcome::kAlreadyPresent:
      return PromoteOutcome::kAlreadyInHost;
    case ReserveOutcome::kInProgress:
      return PromoteOutcome::kInProgress;
    case ReserveOutcome::kReserved:
      break;
  }
  WriteReservation& reservation = reserved.reservation;
  const MutablePayloadView pages = reservation.payload();
  absl::InlinedVector<std::span<std::byte>, 4> parts;
  for (size_t i = 0; i < pages.ranges().size(); ++i) parts.push_back(pages.range_bytes(i));
  if (absl::Status status = disk.Read(key, parts); !status.ok()) {
    host.Abort(std::move(reservation));
    return status;
  }
  // Read checked the bytes against the record's checksum as they arrived, so the host tier
  // takes it instead of digesting the chunk again. Keys name their content, so a record that
  // replaced the looked-up one carries the same checksum; if it did not, verified host loads
  // of the chunk would fail (kDataLoss), never serve it.
  STRATA_RETURN_IF_ERROR(host.Commit(std::move(reservation), info->payload_checksum));
  return PromoteOutcome::kPromoted;
}

}  // namespace strata::storage
