#include "storage/disk/disk_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

#include "core/check.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/disk/aligned_buffer.h"
#include "storage/disk/record_format.h"

namespace strata::storage {

DiskTier::EngineLease::~EngineLease() {
  if (engine_ == nullptr) return;
  absl::MutexLock lock(&tier_->pool_mu_);
  tier_->idle_engines_.push_back(std::move(engine_));
}

DiskTier::DiskTier(const DiskTierOptions& options) : options_(options) {
  stats_.capacity_bytes = options.capacity_bytes;
}

DiskTier::~DiskTier() = default;

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options) {
  if (options.directory.empty()) return absl::InvalidArgumentError("disk tier: no directory");
  if (options.segment_bytes == 0 || options.segment_bytes % kIoAlignment != 0 ||
      options.segment_bytes < 2 * kRecordHeaderBytes) {
    return absl::InvalidArgumentError(
        fmt::format("disk tier: segment_bytes {} is not a multiple of 4 KiB of at least 8 KiB",
                    options.segment_bytes));
  }
  if (options.capacity_bytes < 3 * options.segment_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("disk tier: capacity_bytes {} is below three segments ({} bytes)",
                    options.capacity_bytes, 3 * options.segment_bytes));
  }
  if (options.max_io_bytes == 0 || options.max_io_bytes % kIoAlignment != 0) {
    return absl::InvalidArgumentError("disk tier: max_io_bytes is not a multiple of 4 KiB");
  }
  std::unique_ptr<DiskTier> tier(new DiskTier(options));
  STRATA_RETURN_IF_ERROR(tier->Recover());
  return tier;
}

absl::StatusOr<DiskTier::EngineLease> DiskTier::LeaseEngine() const {
  {
    absl::MutexLock lock(&pool_mu_);
    if (!idle_engines_.empty()) {
      std::unique_ptr<IoEngine> engine = std::move(idle_engines_.back());
      idle_engines_.pop_back();
      return EngineLease(this, std::move(engine));
    }
  }
  absl::StatusOr<std::unique_ptr<IoEngine>> engine =
      options_.make_engine ? options_.make_engine() : MakeIoEngine(options_.io);
  if (!engine.ok()) return Annotate(engine.status(), "disk tier: io engine");
  return EngineLease(this, std::move(engine).value());
}

std::string DiskTier::engine_name() const {
  absl::StatusOr<EngineLease> engine = LeaseEngine();
  return engine.ok() ? std::string((*engine)->name()) : "unavailable";
}

absl::Status DiskTier::Put(const ChunkKey& key, uint64_t layout_fingerprint,
                           std::span<const std::byte> payload, uint64_t payload_checksum,
                           uint32_t num_tokens) {
  const std::span<const std::byte> parts[] = {payload};
  return Put(key, layout_fingerprint, parts, payload_checksum, num_tokens);
}

absl::Status DiskTier::Put(const ChunkKey& key, uint64_t layout_fingerprint, ConstParts payload,
                           uint64_t payload_checksum, uint32_t num_tokens) {
  const uint64_t payload_bytes = PartsBytes(payload);
  const uint64_t record_bytes = RecordBytes(payload_bytes);
  if (record_bytes > options_.segment_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("disk tier: a {}-byte record exceeds the segment size {}", record_bytes,
                    options_.segment_bytes));
  }
  Reservation reservation;
  for (;;) {
    std::optional<uint64_t> to_compact;
    {
      absl::MutexLock lock(&mu_);
      if (chunks_.contains(key) || writing_.contains(key)) return absl::OkStatus();
      STRATA_ASSIGN_OR_RETURN(to_compact, MakeRoom(record_bytes));
      if (!to_compact.has_value()) {
        STRATA_ASSIGN_OR_RETURN(reservation, Reserve(record_bytes));
        writing_.insert(key);
        break;
      }
    }
    // Dead records take the space: copy the live ones of the emptiest segment forward, or, when
    // that cannot be done, evict them with their segment.
    STRATA_ASSIGN_OR_RETURN(const bool compacted, CompactSegment(*to_compact));
    if (!compacted) {
      absl::MutexLock lock(&mu_);
      STRATA_RETURN_IF_ERROR(EvictSegmentLocked(*to_compact));
    }
  }
  AlignedBuffer header(kRecordHeaderBytes);
  EncodeRecordHeader({.key = key,
                      .layout_fingerprint = layout_fingerprint,
                      .payload_bytes = payload_bytes,
                      .payload_checksum = payload_checksum,
                      .num_tokens = num_tokens},
                     header.span());
  absl::Status status;
  {
    absl::StatusOr<EngineLease> engine = LeaseEngine();
    status = engine.status();
    if (status.ok()) {
      status = WriteRecord(**engine, reservation.file->fd(), reservation.position.offset,
                           header.span(), payload, options_.max_io_bytes);
    }
    if (status.ok()) status = (*engine)->Fdatasync(reservation.file->fd());
  }
  absl::MutexLock lock(&mu_);
  writing_.erase(key);
  Release(reservation);
  if (!status.ok()) {
    ++stats_.io_errors;
    if (status.code() != absl::StatusCode::kResourceExhausted) {
      status = absl::UnavailableError(std::string(status.message()));
    }
    return Annotate(
        status, fmt::format("disk tier: put segment {} offset {}", reservation.position.segment_id,
                            reservation.position.offset));
  }
  STRATA_RETURN_IF_ERROR(Commit(key, {.segment_id = reservation.position.segment_id,
                                      .offset = reservation.position.offset,
                                      .payload_bytes = payload_bytes,
                                      .payload_checksum = payload_checksum,
                                      .layout_fingerprint = layout_fingerprint,
                                      .num_tokens = num_tokens}));
  ++stats_.writes;
  stats_.written_bytes += payload_bytes;
  if (!DirectCapable(payload)) ++stats_.staged_writes;
  return absl::OkStatus();
}

std::optional<DiskChunkInfo> DiskTier::Lookup(const ChunkKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = chunks_.find(key);
  if (it == chunks_.end()) return std::nullopt;
  const IndexEntry& entry = it->second.entry;
  return DiskChunkInfo{.payload_bytes = entry.payload_bytes,
                       .payload_checksum = entry.payload_checksum,
                       .layout_fingerprint = entry.layout_fingerprint,
                       .num_tokens = entry.num_tokens};
}

absl::Status DiskTier::Read(const ChunkKey& key, std::span<std::byte> destination) {
  const std::span<std::byte> parts[] = {destination};
  return Read(key, parts);
}

absl::Status DiskTier::Read(const ChunkKey& key, MutableParts destination) {
  IndexEntry entry;
  std::shared_ptr<SegmentFile> file;
  {
    absl::MutexLock lock(&mu_);
    auto it = chunks_.find(key);
    if (it == chunks_.end()) {
      return absl::AbortedError(fmt::format("disk tier: {} is not on disk", key.ToString()));
    }
    entry = it->second.entry;
    file = segments_.at(entry.segment_id).file;
    policy_->OnAccess(it->second.policy_id);
  }
  if (PartsBytes(destination) != entry.payload_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("disk tier: destination of {} bytes for a {}-byte chunk",
                    PartsBytes(destination), entry.payload_bytes));
  }
  absl::StatusOr<uint64_t> checksum = [&]() -> absl::StatusOr<uint64_t> {
    STRATA_ASSIGN_OR_RETURN(EngineLease engine, LeaseEngine());
    return ReadPayload(*engine, file->fd(), entry.offset + kRecordHeaderBytes, destination,
                       options_.max_io_bytes);
  }();
  absl::MutexLock lock(&mu_);
  if (checksum.ok() && *checksum == entry.payload_checksum) {
    ++stats_.reads;
    stats_.read_bytes += entry.payload_bytes;
    if (!DirectCapable(destination)) ++stats_.staged_reads;
    return absl::OkStatus();
  }
  const std::string problem =
      checksum.ok() ? "checksum mismatch" : std::string(checksum.status().message());
  if (checksum.ok()) {
    ++stats_.checksum_failures;
  } else {
    ++stats_.io_errors;
  }
  auto it = chunks_.find(key);
  if (it != chunks_.end() && it->second.entry == entry) {
    ++stats_.dropped_records;
    // The chunk is gone from memory either way; an index error leaves a dead entry that the
    // next read after a restart drops again.
    DropLocked(key, /*popped=*/false).IgnoreError();
  }
  return absl::DataLossError(fmt::format("disk tier: read {} segment {} offset {}: {}",
                                         key.ToString(), entry.segment_id, entry.offset, problem));
}

absl::StatusOr<bool> DiskTier::Remove(const ChunkKey& key) {
  absl::MutexLock lock(&mu_);
  if (!chunks_.contains(key)) return false;
  STRATA_RETURN_IF_ERROR(DropLocked(key, /*popped=*/false));
  return true;
}

absl::StatusOr<DiskTier::RemovedChunks> DiskTier::RemoveIf(
    absl::FunctionRef<bool(const ChunkKey&)> predicate) {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<ChunkKey, uint64_t>> doomed;
  for (const auto& [key, chunk] : chunks_) {
    if (predicate(key)) doomed.emplace_back(key, chunk.entry.payload_bytes);
  }
  RemovedChunks removed;
  for (const auto& [key, bytes] : doomed) {
    STRATA_RETURN_IF_ERROR(DropLocked(key, /*popped=*/false));
    ++removed.chunks;
    removed.payload_bytes += bytes;
  }
  return removed;
}

DiskTierStats DiskTier::stats() const {
  absl::MutexLock lock(&mu_);
  DiskTierStats stats = stats_;
  stats.segments = segments_.size();
  stats.disk_bytes += options_.segment_bytes - segments_.at(active_segment_).size_bytes;
  return stats;
}

absl::StatusOr<DiskTier::Reservation> DiskTier::Reserve(uint64_t record_bytes) {
  if (segments_.at(active_segment_).size_bytes + record_bytes > options_.segment_bytes) {
    STRATA_RETURN_IF_ERROR(StartSegment());
  }
  Segment& active = segments_.at(active_segment_);
  Reservation reservation{.file = active.file,
                          .position = {active_segment_, active.size_bytes},
                          .record_bytes = record_bytes};
  active.size_bytes += record_bytes;
  ++active.pending;
  stats_.disk_bytes += record_bytes;
  pending_.insert(reservation.position);
  pending_bytes_ += record_bytes;
  return reservation;
}

absl::StatusOr<std::optional<uint64_t>> DiskTier::MakeRoom(uint64_t record_bytes) {
  // Two segments of the capacity are kept: one for the active segment's preallocation, one for
  // compaction, so that it has room to copy.
  const uint64_t limit = options_.capacity_bytes - 2 * options_.segment_bytes;
  // Live data first: the policy's victims.
  while (stats_.live_bytes + pending_bytes_ + record_bytes > limit) {
    const std::optional<ChunkId> victim = policy_->PopVictim();
    if (!victim.has_value()) {
      return absl::ResourceExhaustedError(fmt::format(
          "disk tier: full ({} bytes live, {} being written, limit {}), nothing evictable",
          stats_.live_bytes, pending_bytes_, limit));
    }
    ++stats_.evictions;
    STRATA_RETURN_IF_ERROR(DropLocked(by_policy_id_.at(*victim), /*popped=*/true));
  }
  // Then the files: dead records take space until their segment is deleted.
  while (stats_.disk_bytes + record_bytes > limit) {
    std::optional<uint64_t> emptiest;
    for (const auto& [id, segment] : segments_) {
      if (id == active_segment_ || segment.pending > 0 || segment.compacting) continue;
      if (!emptiest.has_value() || segment.live_bytes < segments_.at(*emptiest).live_bytes) {
        emptiest = id;
      }
    }
    if (!emptiest.has_value()) {
      // Seal the active segment so that it can be reclaimed.
      if (segments_.at(active_segment_).size_bytes == 0) {
        return absl::ResourceExhaustedError(
            fmt::format("disk tier: full ({} bytes in segments being written or compacted, "
                        "limit {})",
                        stats_.disk_bytes, limit));
      }
      STRATA_RETURN_IF_ERROR(StartSegment());
      continue;
    }
    if (segments_.at(*emptiest).live_bytes > 0) return emptiest;
    RetireLocked(*emptiest);
  }
  return std::nullopt;
}

absl::Status DiskTier::EvictSegmentLocked(uint64_t segment_id) {
  auto segment = segments_.find(segment_id);
  if (segment == segments_.end() || segment_id == active_segment_ || segment->second.pending > 0 ||
      segment->second.compacting) {
    return absl::OkStatus();  // reclaimed or in use meanwhile: MakeRoom looks again
  }
  std::vector<ChunkKey> residents;
  for (const auto& [key, chunk] : chunks_) {
    if (chunk.entry.segment_id == segment_id) residents.push_back(key);
  }
  for (const ChunkKey& key : residents) {
    ++stats_.evictions;
    STRATA_RETURN_IF_ERROR(DropLocked(key, /*popped=*/false));
  }
  RetireLocked(segment_id);
  return absl::OkStatus();
}

uint64_t DiskTier::BlocksAfterLocked(uint64_t record_bytes) const {
  const uint64_t head = segments_.at(active_segment_).size_bytes;
  const bool fits = head + record_bytes <= options_.segment_bytes;
  return stats_.disk_bytes + options_.segment_bytes - (fits ? head : 0);
}

absl::Status DiskTier::StartSegment() {
  const uint64_t id = segments_.empty() ? 1 : segments_.rbegin()->first + 1;
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<SegmentFile> file,
                          SegmentFile::Open(options_.directory, id, /*create=*/true));
  // Allocating the blocks up front spares every append's fdatasync the block allocation.
  if (::fallocate(file->fd(), FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(options_.segment_bytes)) !=
          0 &&
      errno != EOPNOTSUPP) {
    const int error_number = errno;
    ::unlink(file->path().c_str());
    return ErrnoToStatus(error_number, fmt::format("disk tier: preallocate {}", file->path()));
  }
  if (active_segment_ != 0) SealLocked(segments_.at(active_segment_));
  segments_[id] = Segment{.file = std::move(file)};
  active_segment_ = id;
  return absl::OkStatus();
}

void DiskTier::SealLocked(Segment& segment) {
  const uint64_t head = segment.size_bytes;
  if (head < options_.segment_bytes) {
    // Gives back the preallocated blocks past the last record. Writes in flight lie below
    // `head`. A file system without hole punching keeps them: it could not preallocate either.
    ::fallocate(segment.file->fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                static_cast<off_t>(head), static_cast<off_t>(options_.segment_bytes - head));
  }
}

void DiskTier::Release(const Reservation& reservation) {
  pending_.erase(reservation.position);
  pending_bytes_ -= reservation.record_bytes;
  --segments_.at(reservation.position.segment_id).pending;
}

LogPosition DiskTier::WatermarkLocked() const {
  if (!pending_.empty()) return *pending_.begin();
  return {active_segment_, segments_.at(active_segment_).size_bytes};
}

absl::Status DiskTier::Commit(const ChunkKey& key, const IndexEntry& entry) {
  STRATA_RETURN_IF_ERROR(index_->Put(key, entry, WatermarkLocked()));
  const ChunkId id = next_policy_id_++;
  chunks_[key] = Chunk{.entry = entry, .policy_id = id};
  by_policy_id_[id] = key;
  const uint64_t record_bytes = RecordBytes(entry.payload_bytes);
  policy_->OnInsert({.id = id, .key_hash = key.ShortHash(), .size_bytes = record_bytes});
  segments_.at(entry.segment_id).live_bytes += record_bytes;
  stats_.live_bytes += record_bytes;
  stats_.payload_bytes += entry.payload_bytes;
  ++stats_.chunks;
  return absl::OkStatus();
}

absl::Status DiskTier::DropLocked(ChunkKey key, bool popped) {
  auto it = chunks_.find(key);
  STRATA_CHECK(it != chunks_.end());
  const IndexEntry entry = it->second.entry;
  const uint64_t record_bytes = RecordBytes(entry.payload_bytes);
  segments_.at(entry.segment_id).live_bytes -= record_bytes;
  stats_.live_bytes -= record_bytes;
  stats_.payload_bytes -= entry.payload_bytes;
  --stats_.chunks;
  if (!popped) policy_->OnRemove(it->second.policy_id);
  by_policy_id_.erase(it->second.policy_id);
  chunks_.erase(it);
  return index_->Delete(key);
}

void DiskTier::RetireLocked(uint64_t segment_id) {
  auto it = segments_.find(segment_id);
  STRATA_CHECK(it != segments_.end() && it->second.live_bytes == 0 && it->second.pending == 0 &&
               segment_id != active_segment_);
  // Readers holding the file keep reading it; the name goes now, the space with the last fd.
  ::unlink(it->second.file->path().c_str());
  stats_.disk_bytes -= it->second.size_bytes;
  segments_.erase(it);
}

}  // namespace strata::storage
