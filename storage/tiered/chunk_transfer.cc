#include "storage/tiered/chunk_transfer.h"

#include <optional>
#include <span>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "storage/tiered/host_forms.h"

namespace strata::storage {

absl::InlinedVector<std::span<const std::byte>, 4> PayloadParts(const PayloadView& payload) {
  absl::InlinedVector<std::span<const std::byte>, 4> parts;
  for (size_t i = 0; i < payload.ranges().size(); ++i) parts.push_back(payload.range_bytes(i));
  return parts;
}

absl::Status PutPayload(LowerTier& below, const ChunkKey& key, const PayloadView& payload,
                        uint64_t checksum, uint32_t num_tokens, std::string_view tenant) {
  const absl::InlinedVector<std::span<const std::byte>, 4> parts = PayloadParts(payload);
  return below.PutOne({.key = key,
                       .payload = parts,
                       .payload_checksum = checksum,
                       .num_tokens = num_tokens,
                       .tenant = tenant});
}

absl::StatusOr<bool> CopyDown(HostTier& host, LowerTier& below, const ChunkKey& key,
                              const KnownLayouts& layouts) {
  STRATA_ASSIGN_OR_RETURN(std::optional<ChunkLease> lease,
                          host.AcquireForCopy(key, std::nullopt, Forms::kAny));
  if (!lease.has_value()) return false;
  const std::string tenant = host.TenantOf(key);
  STRATA_RETURN_IF_ERROR(
      WithChunkBytes(layouts, key, lease->num_tokens(), lease->payload(), lease->checksum(),
                     lease->encoding(), [&](const PayloadView& chunk, uint64_t checksum) {
                       return PutPayload(below, key, chunk, checksum, lease->num_tokens(), tenant);
                     }));
  return true;
}

namespace {

// A host reservation for a chunk being promoted, or the outcome that settled it without one.
struct PromotionSlot {
  std::optional<PromoteOutcome> settled;
  WriteReservation reservation;
};

// Checks the chunk's size (`payload_bytes` of `num_tokens` tokens, found `where`) against
// `layout` and reserves it in the host tier, under `tenant` (the tenant the tier below recorded;
// nullopt: none); without a layout (null), reserves the size found.
absl::StatusOr<PromotionSlot> ReserveSlot(HostTier& host, const KvLayout* layout,
                                          const ChunkKey& key, uint64_t payload_bytes,
                                          uint32_t num_tokens, std::string_view where,
                                          std::optional<std::string_view> tenant) {
  if (layout != nullptr && (num_tokens == 0 || layout->chunk_bytes(num_tokens) != payload_bytes)) {
    return absl::InvalidArgumentError(
        fmt::format("promote {}: {} bytes {} for {} tokens of a layout of {} bytes each",
                    key.ToString(), payload_bytes, where, num_tokens, layout->bytes_per_token()));
  }
  const ReserveOptions options{.num_tokens = num_tokens, .reused = true, .tenant_name = tenant};
  STRATA_ASSIGN_OR_RETURN(ReserveResult reserved,
                          layout != nullptr ? host.Reserve(*layout, key, options)
                                            : host.ReserveSized(key, payload_bytes, options));
  switch (reserved.outcome) {
    case ReserveOutcome::kAlreadyPresent:
      return PromotionSlot{.settled = PromoteOutcome::kAlreadyInHost};
    case ReserveOutcome::kInProgress:
      return PromotionSlot{.settled = PromoteOutcome::kInProgress};
    case ReserveOutcome::kReserved:
      break;
  }
  return PromotionSlot{.reservation = std::move(reserved.reservation)};
}

// Promotes a chunk the demoter holds for its disk write from its staging buffer (a memcpy, no
// disk read), with the checksum the host tier gave it when it was first committed.
absl::StatusOr<PromoteOutcome> PromoteFromStaging(HostTier& host, const KvLayout* layout,
                                                  const ChunkKey& key,
                                                  const StagedPayload& payload) {
  STRATA_ASSIGN_OR_RETURN(PromotionSlot slot,
                          ReserveSlot(host, layout, key, payload.payload_bytes, payload.num_tokens,
                                      "staged for disk", payload.tenant));
  if (slot.settled.has_value()) return *slot.settled;
  slot.reservation.payload().CopyFrom(payload.payload());
  STRATA_RETURN_IF_ERROR(host.Commit(std::move(slot.reservation), payload.checksum));
  return PromoteOutcome::kPromoted;
}

// PromoteRun, with the layout's size check when `layout` is set (PromoteRunAsRecorded: null).
std::vector<absl::StatusOr<PromoteOutcome>> PromoteRunChecked(LowerTier& below, HostTier& host,
                                                              const KvLayout* layout,
                                                              std::span<const ChunkKey> keys,
                                                              const Demoter* staged) {
  std::vector<absl::StatusOr<PromoteOutcome>> results(keys.size(), PromoteOutcome::kNotBelow);
  // The chunks reserved for a disk read, with their reservations and record checksums.
  std::vector<size_t> reading;
  std::vector<ChunkKey> reading_keys;
  std::vector<WriteReservation> reservations;
  std::vector<uint64_t> checksums;
  for (size_t i = 0; i < keys.size(); ++i) {
    const ChunkKey& key = keys[i];
    if (staged != nullptr) {
      // Held alive by this pointer while it is copied, even if its write finishes meanwhile.
      if (std::shared_ptr<const StagedPayload> payload = staged->FindStaged(key)) {
        results[i] = PromoteFromStaging(host, layout, key, *payload);
        continue;
      }
    }
    const std::optional<LowerTier::ChunkInfo> info = below.Lookup(key);
    if (!info.has_value()) continue;
    absl::StatusOr<PromotionSlot> slot = ReserveSlot(
        host, layout, key, info->payload_bytes, info->num_tokens, "on disk",
        below.records_tenants() ? std::optional<std::string_view>(info->tenant) : std::nullopt);
    if (!slot.ok() || slot->settled.has_value()) {
      results[i] = slot.ok() ? absl::StatusOr<PromoteOutcome>(*slot->settled) : slot.status();
      continue;
    }
    reading.push_back(i);
    reading_keys.push_back(key);
    reservations.push_back(std::move(slot->reservation));
    checksums.push_back(info->payload_checksum);
  }
  if (reading.empty()) return results;

  // One queue of reads straight into the reserved arena pages. Read checks the bytes against
  // the record's checksum as they arrive, so the host tier takes it instead of digesting the
  // chunk again. Keys name their content, so a record that replaced the looked-up one carries
  // the same checksum; if it did not, verified host loads of the chunk would fail (kDataLoss),
  // never serve it.
  std::vector<absl::InlinedVector<std::span<std::byte>, 4>> pages(reading.size());
  std::vector<LowerTier::MutableParts> destinations;
  destinations.reserve(reading.size());
  for (size_t r = 0; r < reading.size(); ++r) {
    const MutablePayloadView view = reservations[r].payload();
    for (size_t i = 0; i < view.ranges().size(); ++i) pages[r].push_back(view.range_bytes(i));
    destinations.push_back(pages[r]);
  }
  const std::vector<absl::Status> read = below.ReadBatch(reading_keys, destinations);
  for (size_t r = 0; r < reading.size(); ++r) {
    if (!read[r].ok()) {
      host.Abort(std::move(reservations[r]));
      results[reading[r]] = read[r];
      continue;
    }
    const absl::Status committed = host.Commit(std::move(reservations[r]), checksums[r]);
    results[reading[r]] =
        committed.ok() ? absl::StatusOr<PromoteOutcome>(PromoteOutcome::kPromoted) : committed;
  }
  return results;
}

}  // namespace

absl::StatusOr<PromoteOutcome> PromoteChunk(LowerTier& below, HostTier& host,
                                            const KvLayout& layout, const ChunkKey& key,
                                            const Demoter* staged) {
  return PromoteRunChecked(below, host, &layout, {&key, 1}, staged).front();
}

std::vector<absl::StatusOr<PromoteOutcome>> PromoteRun(LowerTier& below, HostTier& host,
                                                       const KvLayout& layout,
                                                       std::span<const ChunkKey> keys,
                                                       const Demoter* staged) {
  return PromoteRunChecked(below, host, &layout, keys, staged);
}

std::vector<absl::StatusOr<PromoteOutcome>> PromoteRunAsRecorded(LowerTier& below, HostTier& host,
                                                                 std::span<const ChunkKey> keys,
                                                                 const Demoter* staged) {
  return PromoteRunChecked(below, host, nullptr, keys, staged);
}

}  // namespace strata::storage
