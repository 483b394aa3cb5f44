// DiskTier::Replace: another stored form of a chunk, swapped in whole (see disk_tier.h).
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/disk/disk_tier.h"
#include "storage/disk/record_format.h"
#include "storage/host/payload_view.h"
#include "storage/io/aligned_buffer.h"

namespace strata::storage {

absl::StatusOr<bool> DiskTier::Replace(const DiskPut& put, const DiskChunkInfo& expected) {
  const auto unchanged = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return MatchesLocked(put.key, expected);
  };
  const uint64_t payload_bytes = PartsBytes(put.payload);
  STRATA_ASSIGN_OR_RETURN(std::optional<Reservation> reservation,
                          ReserveWhile(RecordBytes(payload_bytes), unchanged, [] {}));
  if (!reservation.has_value()) return false;
  const IndexEntry entry = EntryOf(put, reservation->position);
  AlignedBuffer header(kRecordHeaderBytes);
  EncodeRecordHeader(HeaderOf(put.key, entry), header.span());
  absl::Status status;
  {
    absl::StatusOr<EngineLease> engine = LeaseEngine();
    status = engine.status();
    if (status.ok()) {
      status = WriteRecord(**engine, reservation->file->fd(), reservation->position.offset,
                           header.span(), put.payload, options_.max_io_bytes);
    }
    if (status.ok()) status = (*engine)->Fdatasync(reservation->file->fd());
  }
  absl::MutexLock lock(&mu_);
  Release(*reservation);
  if (!status.ok()) {
    ++stats_.io_errors;
    return Annotate(absl::UnavailableError(std::string(status.message())),
                    fmt::format("disk tier: replace {}", put.key.ToString()));
  }
  if (!MatchesLocked(put.key, expected)) return false;  // the new record is dead space
  STRATA_RETURN_IF_ERROR(index_->Put(put.key, entry, WatermarkLocked()));
  SwapEntryLocked(put.key, chunks_.at(put.key), entry);
  ++stats_.writes;
  stats_.written_bytes += payload_bytes;
  return true;
}

void DiskTier::SwapEntryLocked(const ChunkKey& key, Chunk& chunk, const IndexEntry& entry) {
  const IndexEntry old = chunk.entry;
  const uint64_t old_bytes = RecordBytes(old.payload_bytes);
  const uint64_t new_bytes = RecordBytes(entry.payload_bytes);
  segments_.at(old.segment_id).live_bytes -= old_bytes;
  segments_.at(entry.segment_id).live_bytes += new_bytes;
  stats_.live_bytes += new_bytes - old_bytes;
  stats_.payload_bytes += entry.payload_bytes - old.payload_bytes;
  CountEncodingLocked(old, -1);
  CountEncodingLocked(entry, +1);
  chunk.entry = entry;
  // Its size changed: the policy learns it as a new chunk under the same id.
  policy_->OnRemove(chunk.policy_id);
  policy_->OnInsert({.id = chunk.policy_id, .key_hash = key.ShortHash(), .size_bytes = new_bytes});
}

}  // namespace strata::storage
