#include "storage/disk/disk_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>

#include "core/check.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/disk/record_format.h"
#include "storage/io/aligned_buffer.h"

namespace strata::storage {

DiskTier::DiskTier(const DiskTierOptions& options)
    : options_(options),
      engines_(options.make_engine
                   ? options.make_engine
                   : IoEnginePool::MakeEngine([io = options.io] { return MakeIoEngine(io); })) {
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
  absl::StatusOr<EngineLease> engine = engines_.Acquire();
  if (!engine.ok()) return Annotate(engine.status(), "disk tier: io engine");
  return engine;
}

absl::Status DiskTier::RegisterMemory(std::span<const std::span<std::byte>> regions) {
  return Annotate(engines_.RegisterMemory(regions), "disk tier: register memory");
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
  const DiskPut put[] = {{.key = key,
                          .layout_fingerprint = layout_fingerprint,
                          .payload = payload,
                          .payload_checksum = payload_checksum,
                          .num_tokens = num_tokens}};
  return PutBatch(put).front();
}

std::vector<absl::Status> DiskTier::PutBatch(std::span<const DiskPut> puts) {
  std::vector<absl::Status> statuses(puts.size());
  size_t next = 0;
  while (next < puts.size()) {
    // Reserve as many records as there is room for; store them; go on with the rest.
    std::vector<PendingRecord> records;
    for (; next < puts.size(); ++next) {
      absl::StatusOr<std::optional<Reservation>> reservation = ReserveFor(puts[next]);
      if (!reservation.ok()) {
        if (reservation.status().code() == absl::StatusCode::kResourceExhausted &&
            !records.empty()) {
          break;  // storing the reserved ones may make room (or evict them): retry after
        }
        statuses[next] = reservation.status();
        continue;
      }
      if (!reservation->has_value()) continue;  // stored or being stored already
      const DiskPut& put = puts[next];
      const IndexEntry entry = EntryOf(put, (*reservation)->position);
      records.push_back({.put = next,
                         .key = put.key,
                         .reservation = std::move(**reservation),
                         .entry = entry,
                         .staged = !DirectCapable(put.payload)});
    }
    WriteAndCommit(puts, records);
    for (const PendingRecord& record : records) statuses[record.put] = record.status;
  }
  return statuses;
}

absl::StatusOr<std::optional<DiskTier::Reservation>> DiskTier::ReserveFor(const DiskPut& put) {
  return ReserveWhile(
      RecordBytes(PartsBytes(put.payload)),
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !chunks_.contains(put.key) && !writing_.contains(put.key);
      },
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { writing_.insert(put.key); });
}

absl::StatusOr<std::optional<DiskTier::Reservation>> DiskTier::ReserveWhile(
    uint64_t record_bytes, absl::FunctionRef<bool()> wanted, absl::FunctionRef<void()> claim) {
  if (record_bytes > options_.segment_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("disk tier: a {}-byte record exceeds the segment size {}", record_bytes,
                    options_.segment_bytes));
  }
  for (;;) {
    std::optional<uint64_t> to_compact;
    {
      absl::MutexLock lock(&mu_);
      if (!wanted()) return std::nullopt;
      STRATA_ASSIGN_OR_RETURN(to_compact, MakeRoom(record_bytes));
      if (!to_compact.has_value()) {
        STRATA_ASSIGN_OR_RETURN(Reservation reservation, Reserve(record_bytes));
        claim();
        return reservation;
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
}

void DiskTier::WriteAndCommit(std::span<const DiskPut> puts, std::span<PendingRecord> records) {
  if (records.empty()) return;
  std::vector<AlignedBuffer> headers;
  std::vector<RecordWrite> writes;
  headers.reserve(records.size());
  writes.reserve(records.size());
  for (PendingRecord& record : records) {
    const DiskPut& put = puts[record.put];
    const AlignedBuffer& header = headers.emplace_back(kRecordHeaderBytes);
    EncodeRecordHeader(HeaderOf(record.key, record.entry), header.span());
    writes.push_back({.fd = record.reservation.file->fd(),
                      .offset = record.reservation.position.offset,
                      .header_block = header.span(),
                      .payload = put.payload});
  }
  {
    absl::StatusOr<EngineLease> engine = LeaseEngine();
    for (size_t i = 0; i < records.size(); ++i) records[i].status = engine.status();
    if (engine.ok()) {
      std::vector<absl::Status> written = WriteRecords(**engine, writes, options_.max_io_bytes);
      for (size_t i = 0; i < records.size(); ++i) records[i].status = std::move(written[i]);
    }
  }
  GroupCommit(records);
}

void DiskTier::GroupCommit(std::span<PendingRecord> records) {
  {
    absl::MutexLock lock(&mu_);
    for (PendingRecord& record : records) {
      if (record.status.ok()) {
        commit_queue_.push_back(&record);
      } else {
        // A failed write never reaches the index: its place is dead from now on.
        writing_.erase(record.key);
        Release(record.reservation);
        ++stats_.io_errors;
        record.done = true;
      }
    }
  }
  struct Waiting {
    const DiskTier* tier;
    std::span<PendingRecord> records;
  };
  const Waiting waiting{this, records};
  for (;;) {
    std::vector<PendingRecord*> group;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](const Waiting* w) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            if (!w->tier->committing_) return true;
            return std::all_of(w->records.begin(), w->records.end(),
                               [](const PendingRecord& r) { return r.done; });
          },
          &waiting));
      if (std::all_of(records.begin(), records.end(),
                      [](const PendingRecord& r) { return r.done; })) {
        break;
      }
      // No leader, and this caller's records are queued: lead the next group.
      committing_ = true;
      group.swap(commit_queue_);
    }
    // One fdatasync per segment of the group, in the order first named.
    std::vector<absl::Status> sync_status(group.size());
    {
      absl::StatusOr<EngineLease> engine = LeaseEngine();
      std::vector<std::pair<const SegmentFile*, absl::Status>> synced;
      for (size_t i = 0; i < group.size(); ++i) {
        const SegmentFile* file = group[i]->reservation.file.get();
        auto it = std::find_if(synced.begin(), synced.end(),
                               [&](const auto& done) { return done.first == file; });
        if (it == synced.end()) {
          synced.emplace_back(file,
                              engine.ok() ? (*engine)->Fdatasync(file->fd()) : engine.status());
          it = std::prev(synced.end());
        }
        sync_status[i] = it->second;
      }
    }
    // The index's files count against the capacity: measured once per group, off the lock.
    const uint64_t index_bytes = index_->FileBytes();
    absl::MutexLock lock(&mu_);
    stats_.index_bytes = index_bytes;
    CommitGroupLocked(group, sync_status);
    committing_ = false;
  }
  for (PendingRecord& record : records) {
    if (record.status.ok()) continue;
    if (record.status.code() != absl::StatusCode::kResourceExhausted) {
      record.status = absl::UnavailableError(std::string(record.status.message()));
    }
    record.status = Annotate(record.status, fmt::format("disk tier: put segment {} offset {}",
                                                        record.reservation.position.segment_id,
                                                        record.reservation.position.offset));
  }
}

void DiskTier::CommitGroupLocked(std::span<PendingRecord* const> group,
                                 std::span<const absl::Status> sync_status) {
  // Every place of the group ends its reservation before the watermark is taken, so the
  // watermark written with the entries lies past all of them.
  std::vector<std::pair<ChunkKey, IndexEntry>> entries;
  for (size_t i = 0; i < group.size(); ++i) {
    PendingRecord& record = *group[i];
    writing_.erase(record.key);
    Release(record.reservation);
    record.status = sync_status[i];
    if (record.status.ok()) {
      entries.emplace_back(record.key, record.entry);
    } else {
      ++stats_.io_errors;
    }
  }
  const absl::Status indexed =
      entries.empty() ? absl::OkStatus() : index_->PutBatch(entries, WatermarkLocked());
  for (PendingRecord* record : group) {
    if (record->status.ok()) {
      record->status = indexed;
      if (indexed.ok()) {
        InsertLocked(record->key, record->entry);
        ++stats_.writes;
        stats_.written_bytes += record->entry.payload_bytes;
        if (record->staged) ++stats_.staged_writes;
      }
    }
    record->done = true;
  }
}

DiskChunkInfo DiskTier::InfoOf(const IndexEntry& entry) {
  return DiskChunkInfo{.payload_bytes = entry.payload_bytes,
                       .payload_checksum = entry.payload_checksum,
                       .layout_fingerprint = entry.layout_fingerprint,
                       .num_tokens = entry.num_tokens,
                       .encoding = entry.encoding,
                       .tenant = entry.tenant};
}

IndexEntry DiskTier::EntryOf(const DiskPut& put, LogPosition position) {
  return IndexEntry{.segment_id = position.segment_id,
                    .offset = position.offset,
                    .payload_bytes = PartsBytes(put.payload),
                    .payload_checksum = put.payload_checksum,
                    .layout_fingerprint = put.layout_fingerprint,
                    .num_tokens = put.num_tokens,
                    .encoding = put.encoding,
                    .tenant = put.tenant.size() <= kMaxRecordTenantBytes ? std::string(put.tenant)
                                                                         : std::string()};
}

RecordHeader DiskTier::HeaderOf(const ChunkKey& key, const IndexEntry& entry) {
  return RecordHeader{.key = key,
                      .layout_fingerprint = entry.layout_fingerprint,
                      .payload_bytes = entry.payload_bytes,
                      .payload_checksum = entry.payload_checksum,
                      .num_tokens = entry.num_tokens,
                      .encoding = entry.encoding,
                      .tenant = entry.tenant};
}

bool DiskTier::MatchesLocked(const ChunkKey& key, const DiskChunkInfo& expected) const {
  auto it = chunks_.find(key);
  return it != chunks_.end() && InfoOf(it->second.entry) == expected;
}

absl::Status DiskTier::KeepLayout(const KvLayout& layout) {
  const uint64_t fingerprint = layout.Fingerprint();
  absl::MutexLock lock(&mu_);
  if (layouts_.contains(fingerprint)) return absl::OkStatus();
  STRATA_RETURN_IF_ERROR(index_->PutLayout(layout));
  layouts_[fingerprint] = std::make_shared<const KvLayout>(layout);
  return absl::OkStatus();
}

std::shared_ptr<const KvLayout> DiskTier::KeptLayout(uint64_t fingerprint) const {
  absl::MutexLock lock(&mu_);
  auto it = layouts_.find(fingerprint);
  return it == layouts_.end() ? nullptr : it->second;
}

std::optional<DiskChunkInfo> DiskTier::Lookup(const ChunkKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = chunks_.find(key);
  if (it == chunks_.end()) return std::nullopt;
  return InfoOf(it->second.entry);
}

bool DiskTier::Contains(const ChunkKey& key) const {
  absl::MutexLock lock(&mu_);
  return chunks_.contains(key);
}

absl::Status DiskTier::Read(const ChunkKey& key, std::span<std::byte> destination) {
  const std::span<std::byte> parts[] = {destination};
  return Read(key, parts);
}

absl::Status DiskTier::Read(const ChunkKey& key, MutableParts destination) {
  return ReadBatch({&key, 1}, {&destination, 1}).front();
}

std::vector<absl::Status> DiskTier::ReadBatch(std::span<const ChunkKey> keys,
                                              std::span<const MutableParts> destinations) {
  std::vector<absl::Status> statuses(keys.size());
  if (destinations.size() != keys.size()) {
    statuses.assign(keys.size(), absl::InvalidArgumentError(
                                     fmt::format("disk tier: {} destinations for {} chunks",
                                                 destinations.size(), keys.size())));
    return statuses;
  }
  // The chunks found, where their records lie, and the reads of their payloads.
  std::vector<size_t> found;
  std::vector<IndexEntry> entries;
  std::vector<std::shared_ptr<SegmentFile>> files;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = chunks_.find(keys[i]);
      if (it == chunks_.end()) {
        statuses[i] =
            absl::AbortedError(fmt::format("disk tier: {} is not on disk", keys[i].ToString()));
        continue;
      }
      found.push_back(i);
      entries.push_back(it->second.entry);
      files.push_back(segments_.at(it->second.entry.segment_id).file);
      policy_->OnAccess(it->second.policy_id);
    }
  }
  std::vector<size_t> reading;  // indexes into found
  std::vector<PayloadRead> reads;
  for (size_t f = 0; f < found.size(); ++f) {
    const MutableParts destination = destinations[found[f]];
    if (PartsBytes(destination) != entries[f].payload_bytes) {
      statuses[found[f]] = absl::InvalidArgumentError(
          fmt::format("disk tier: destination of {} bytes for a {}-byte chunk",
                      PartsBytes(destination), entries[f].payload_bytes));
      continue;
    }
    reading.push_back(f);
    reads.push_back({.fd = files[f]->fd(),
                     .payload_offset = entries[f].offset + kRecordHeaderBytes,
                     .payload = destination});
  }
  if (reads.empty()) return statuses;
  std::vector<absl::StatusOr<uint64_t>> checksums;
  if (absl::StatusOr<EngineLease> engine = LeaseEngine(); engine.ok()) {
    checksums = ReadPayloads(**engine, reads, options_.max_io_bytes);
  } else {
    checksums.assign(reads.size(), engine.status());
  }

  absl::MutexLock lock(&mu_);
  for (size_t r = 0; r < reading.size(); ++r) {
    const size_t f = reading[r];
    const ChunkKey& key = keys[found[f]];
    const IndexEntry& entry = entries[f];
    const absl::StatusOr<uint64_t>& checksum = checksums[r];
    if (checksum.ok() && *checksum == entry.payload_checksum) {
      ++stats_.reads;
      stats_.read_bytes += entry.payload_bytes;
      if (!DirectCapable(reads[r].payload)) ++stats_.staged_reads;
      continue;
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
      DropLocked(key, /*popped=*/false, RemovalCause::kCorrupt).IgnoreError();
    }
    statuses[found[f]] =
        absl::DataLossError(fmt::format("disk tier: read {} segment {} offset {}: {}",
                                        key.ToString(), entry.segment_id, entry.offset, problem));
  }
  return statuses;
}

absl::StatusOr<bool> DiskTier::Remove(const ChunkKey& key) {
  absl::MutexLock lock(&mu_);
  if (!chunks_.contains(key)) return false;
  STRATA_RETURN_IF_ERROR(DropLocked(key, /*popped=*/false, RemovalCause::kRemoved));
  return true;
}

absl::StatusOr<bool> DiskTier::DropCorrupt(const ChunkKey& key, const DiskChunkInfo& expected) {
  absl::MutexLock lock(&mu_);
  if (!MatchesLocked(key, expected)) return false;
  ++stats_.dropped_records;
  STRATA_RETURN_IF_ERROR(DropLocked(key, /*popped=*/false, RemovalCause::kCorrupt));
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
    STRATA_RETURN_IF_ERROR(DropLocked(key, /*popped=*/false, RemovalCause::kRemoved));
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
  // compaction, so that it has room to copy. The index's files take their share too.
  const uint64_t kept = 2 * options_.segment_bytes + stats_.index_bytes;
  if (kept >= options_.capacity_bytes) {
    return absl::ResourceExhaustedError(fmt::format(
        "disk tier: full: the index takes {} bytes of a capacity of {} (two segments kept)",
        stats_.index_bytes, options_.capacity_bytes));
  }
  const uint64_t limit = options_.capacity_bytes - kept;
  // Live data first: the policy's victims.
  while (stats_.live_bytes + pending_bytes_ + record_bytes > limit) {
    const std::optional<ChunkId> victim = policy_->PopVictim();
    if (!victim.has_value()) {
      return absl::ResourceExhaustedError(fmt::format(
          "disk tier: full ({} bytes live, {} being written, limit {}), nothing evictable",
          stats_.live_bytes, pending_bytes_, limit));
    }
    ++stats_.evictions;
    STRATA_RETURN_IF_ERROR(
        DropLocked(by_policy_id_.at(*victim), /*popped=*/true, RemovalCause::kEvicted));
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
    const Segment& segment = segments_.at(*emptiest);
    if (segment.live_bytes == 0) {
      RetireLocked(*emptiest);
      continue;
    }
    // Copying a mostly-live segment forward writes more than it frees: a full tier whose dead
    // space is spread thin would copy several segments' worth per Put. While live data takes
    // more than 4/5 of the limit, the policy's next victim goes instead (its record turns dead,
    // which may empty a segment or make one cheap to copy).
    if (segment.live_bytes * 2 > segment.size_bytes && stats_.live_bytes > limit / 5 * 4) {
      const std::optional<ChunkId> victim = policy_->PopVictim();
      if (victim.has_value()) {
        ++stats_.evictions;
        STRATA_RETURN_IF_ERROR(
            DropLocked(by_policy_id_.at(*victim), /*popped=*/true, RemovalCause::kEvicted));
        continue;
      }
    }
    return emptiest;
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
    STRATA_RETURN_IF_ERROR(DropLocked(key, /*popped=*/false, RemovalCause::kEvicted));
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

void DiskTier::CountEncodingLocked(const IndexEntry& entry, int sign) {
  const bool encoded = entry.encoding.encoded();
  const uint64_t decoded = encoded ? entry.encoding.decoded_bytes : entry.payload_bytes;
  if (sign > 0) {
    stats_.decoded_bytes += decoded;
    stats_.encoded_chunks += encoded ? 1 : 0;
  } else {
    stats_.decoded_bytes -= decoded;
    stats_.encoded_chunks -= encoded ? 1 : 0;
  }
}

void DiskTier::InsertLocked(const ChunkKey& key, const IndexEntry& entry) {
  const ChunkId id = next_policy_id_++;
  chunks_[key] = Chunk{.entry = entry, .policy_id = id};
  by_policy_id_[id] = key;
  const uint64_t record_bytes = RecordBytes(entry.payload_bytes);
  policy_->OnInsert({.id = id, .key_hash = key.ShortHash(), .size_bytes = record_bytes});
  segments_.at(entry.segment_id).live_bytes += record_bytes;
  stats_.live_bytes += record_bytes;
  stats_.payload_bytes += entry.payload_bytes;
  CountEncodingLocked(entry, +1);
  ++stats_.chunks;
  if (options_.observer != nullptr) options_.observer->OnStored(key, {}, entry.num_tokens, {});
}

absl::Status DiskTier::DropLocked(ChunkKey key, bool popped, RemovalCause cause) {
  auto it = chunks_.find(key);
  STRATA_CHECK(it != chunks_.end());
  const IndexEntry entry = it->second.entry;
  const uint64_t record_bytes = RecordBytes(entry.payload_bytes);
  segments_.at(entry.segment_id).live_bytes -= record_bytes;
  stats_.live_bytes -= record_bytes;
  stats_.payload_bytes -= entry.payload_bytes;
  CountEncodingLocked(entry, -1);
  --stats_.chunks;
  if (!popped) policy_->OnRemove(it->second.policy_id);
  by_policy_id_.erase(it->second.policy_id);
  chunks_.erase(it);
  if (options_.observer != nullptr) options_.observer->OnRemoved(key, cause);
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
