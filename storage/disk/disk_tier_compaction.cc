// DiskTier::Compact: copies the live records of mostly-dead segments forward (see disk_tier.h).
#include <vector>

#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/disk/disk_tier.h"
#include "storage/disk/record_format.h"
#include "storage/host/payload_view.h"
#include "storage/io/aligned_buffer.h"

namespace strata::storage {

absl::StatusOr<int> DiskTier::Compact(double min_dead_fraction) {
  std::vector<uint64_t> candidates;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, segment] : segments_) {
      if (id == active_segment_ || segment.pending > 0 || segment.size_bytes == 0) continue;
      const double dead = static_cast<double>(segment.size_bytes - segment.live_bytes);
      if (dead >= min_dead_fraction * static_cast<double>(segment.size_bytes)) {
        candidates.push_back(id);
      }
    }
  }
  int deleted = 0;
  for (uint64_t id : candidates) {
    STRATA_ASSIGN_OR_RETURN(const bool done, CompactSegment(id));
    deleted += done ? 1 : 0;
  }
  return deleted;
}

absl::StatusOr<bool> DiskTier::CompactSegment(uint64_t segment_id) {
  std::vector<std::pair<ChunkKey, IndexEntry>> live;
  std::shared_ptr<SegmentFile> source;
  {
    absl::MutexLock lock(&mu_);
    auto segment = segments_.find(segment_id);
    if (segment == segments_.end() || segment_id == active_segment_ || segment->second.compacting ||
        segment->second.pending > 0) {
      return false;
    }
    segment->second.compacting = true;
    source = segment->second.file;
    for (const auto& [key, chunk] : chunks_) {
      if (chunk.entry.segment_id == segment_id) live.push_back({key, chunk.entry});
    }
  }
  absl::StatusOr<bool> moved = MoveRecords(segment_id, *source, live);
  absl::MutexLock lock(&mu_);
  auto segment = segments_.find(segment_id);
  if (segment == segments_.end()) return moved;  // cannot happen while compacting; be safe
  segment->second.compacting = false;
  if (!moved.ok() || !*moved) return moved;
  if (segment->second.live_bytes != 0 || segment->second.pending != 0) return false;
  RetireLocked(segment_id);
  ++stats_.compacted_segments;
  return true;
}

absl::StatusOr<bool> DiskTier::MoveRecords(uint64_t segment_id, const SegmentFile& source,
                                           std::span<const std::pair<ChunkKey, IndexEntry>> live) {
  STRATA_ASSIGN_OR_RETURN(EngineLease engine, LeaseEngine());
  for (const auto& [key, old_entry] : live) {
    const uint64_t record_bytes = RecordBytes(old_entry.payload_bytes);
    AlignedBuffer record(record_bytes);
    const std::span<std::byte> whole[] = {record.span()};
    absl::StatusOr<uint64_t> read_status =
        ReadPayload(*engine, source.fd(), old_entry.offset, whole, options_.max_io_bytes);
    const bool intact = read_status.ok() && ChecksumBytes(record.span().subspan(
                                                kRecordHeaderBytes, old_entry.payload_bytes)) ==
                                                old_entry.payload_checksum;
    Reservation reservation;
    {
      absl::MutexLock lock(&mu_);
      auto it = chunks_.find(key);
      if (it == chunks_.end() || it->second.entry != old_entry) continue;  // gone meanwhile
      if (!intact) {
        ++(read_status.ok() ? stats_.checksum_failures : stats_.io_errors);
        ++stats_.dropped_records;
        STRATA_RETURN_IF_ERROR(DropLocked(key, /*popped=*/false, RemovalCause::kCorrupt));
        continue;
      }
      // Compaction may use the whole capacity (Puts leave it a segment's worth).
      if (BlocksAfterLocked(record_bytes) + stats_.index_bytes > options_.capacity_bytes) {
        return false;
      }
      STRATA_ASSIGN_OR_RETURN(reservation, Reserve(record_bytes));
    }
    const std::span<const std::byte> payload[] = {
        record.span().subspan(kRecordHeaderBytes, record_bytes - kRecordHeaderBytes)};
    absl::Status status =
        WriteRecord(*engine, reservation.file->fd(), reservation.position.offset,
                    record.span().first(kRecordHeaderBytes), payload, options_.max_io_bytes);
    if (status.ok()) status = engine->Fdatasync(reservation.file->fd());
    absl::MutexLock lock(&mu_);
    Release(reservation);
    if (!status.ok()) {
      ++stats_.io_errors;
      return Annotate(status, fmt::format("disk tier: compact segment {}", segment_id));
    }
    auto it = chunks_.find(key);
    if (it == chunks_.end() || it->second.entry != old_entry) continue;  // the copy is dead
    IndexEntry new_entry = old_entry;
    new_entry.segment_id = reservation.position.segment_id;
    new_entry.offset = reservation.position.offset;
    STRATA_RETURN_IF_ERROR(index_->Put(key, new_entry, WatermarkLocked()));
    it->second.entry = new_entry;
    segments_.at(segment_id).live_bytes -= record_bytes;
    segments_.at(new_entry.segment_id).live_bytes += record_bytes;
    stats_.compacted_bytes += record_bytes;
  }
  // The moved entries must be durable before the only other copy of their bytes goes.
  STRATA_RETURN_IF_ERROR(index_->Sync());
  return true;
}

}  // namespace strata::storage
