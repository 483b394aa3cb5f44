// DiskTier::Open's reconciliation of the index with the segment files (see disk_tier.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <vector>

#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/disk/disk_tier.h"
#include "storage/disk/record_format.h"
#include "storage/io/aligned_buffer.h"

namespace strata::storage {

absl::Status DiskTier::Recover() {
  std::error_code error;
  std::filesystem::create_directories(options_.directory, error);
  if (error) {
    return absl::UnavailableError(
        fmt::format("disk tier: create {}: {}", options_.directory, error.message()));
  }
  STRATA_ASSIGN_OR_RETURN(index_, DiskIndex::Open({.path = options_.directory + "/index",
                                                   .sync_writes = options_.sync_index_writes}));
  STRATA_ASSIGN_OR_RETURN(EngineLease engine, LeaseEngine());

  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(policy_, MakeEvictionPolicy(options_.eviction_policy,
                                                      {.capacity_bytes = options_.capacity_bytes}));

  for (const auto& dirent : std::filesystem::directory_iterator(options_.directory, error)) {
    const std::optional<uint64_t> id = SegmentFile::ParseFileName(dirent.path().filename());
    if (!id.has_value()) continue;
    STRATA_ASSIGN_OR_RETURN(std::shared_ptr<SegmentFile> file,
                            SegmentFile::Open(options_.directory, *id, /*create=*/false));
    STRATA_ASSIGN_OR_RETURN(const uint64_t size, file->SizeBytes());
    // A torn O_DIRECT append can leave a partial block: it belongs to no record.
    if (size % kIoAlignment != 0 && ::ftruncate(file->fd(), AlignDown(size)) != 0) {
      return ErrnoToStatus(errno, fmt::format("disk tier: truncate {}", file->path()));
    }
    segments_[*id] = Segment{.file = std::move(file), .size_bytes = AlignDown(size)};
  }
  if (error) {
    return absl::UnavailableError(
        fmt::format("disk tier: list {}: {}", options_.directory, error.message()));
  }

  STRATA_ASSIGN_OR_RETURN(const std::vector<KvLayout> layouts, index_->Layouts());
  for (const KvLayout& layout : layouts) {
    layouts_[layout.Fingerprint()] = std::make_shared<const KvLayout>(layout);
  }

  std::vector<ChunkKey> invalid;
  STRATA_RETURN_IF_ERROR(index_
                             ->ForEach([&](const ChunkKey& key, const IndexEntry& entry) {
                               auto segment = segments_.find(entry.segment_id);
                               if (segment == segments_.end() || entry.offset % kIoAlignment != 0 ||
                                   entry.offset + RecordBytes(entry.payload_bytes) >
                                       segment->second.size_bytes) {
                                 invalid.push_back(key);
                                 return;
                               }
                               chunks_[key] = Chunk{.entry = entry};
                             })
                             .status());
  for (const ChunkKey& key : invalid) STRATA_RETURN_IF_ERROR(index_->Delete(key));
  stats_.dropped_records += invalid.size();

  STRATA_ASSIGN_OR_RETURN(const LogPosition watermark, index_->Watermark());
  for (auto& [id, segment] : segments_) {
    if (id < watermark.segment_id) continue;
    STRATA_RETURN_IF_ERROR(ReconcileSegment(
        segment, id == watermark.segment_id ? AlignDown(watermark.offset) : 0, *engine));
  }

  // Oldest records first in the policy, so they are the first victims.
  std::vector<std::pair<LogPosition, ChunkKey>> by_age;
  by_age.reserve(chunks_.size());
  for (const auto& [key, chunk] : chunks_) {
    by_age.push_back({{chunk.entry.segment_id, chunk.entry.offset}, key});
  }
  std::sort(by_age.begin(), by_age.end());
  for (const auto& [position, key] : by_age) {
    Chunk& chunk = chunks_.at(key);
    chunk.policy_id = next_policy_id_++;
    by_policy_id_[chunk.policy_id] = key;
    const uint64_t record_bytes = RecordBytes(chunk.entry.payload_bytes);
    policy_->OnInsert(
        {.id = chunk.policy_id, .key_hash = key.ShortHash(), .size_bytes = record_bytes});
    segments_.at(position.segment_id).live_bytes += record_bytes;
    stats_.live_bytes += record_bytes;
    stats_.payload_bytes += chunk.entry.payload_bytes;
    CountEncodingLocked(chunk.entry, +1);
    ++stats_.chunks;
  }
  for (const auto& [id, segment] : segments_) {
    // The active segment of the last run was preallocated: give back its unused blocks.
    ::fallocate(segment.file->fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                static_cast<off_t>(segment.size_bytes),
                static_cast<off_t>(std::max(options_.segment_bytes, segment.size_bytes) -
                                   segment.size_bytes + kIoAlignment));
    stats_.disk_bytes += segment.size_bytes;  // records only; stats() adds the preallocation
  }

  // Appends go to a fresh segment; everything before it is now accounted for by the index.
  STRATA_RETURN_IF_ERROR(StartSegment());
  for (auto it = segments_.begin(); it != segments_.end();) {
    const uint64_t id = it->first;
    ++it;
    const Segment& segment = segments_.at(id);
    if (id != active_segment_ && segment.live_bytes == 0) RetireLocked(id);
  }
  STRATA_RETURN_IF_ERROR(index_->SetWatermark({active_segment_, 0}));
  STRATA_RETURN_IF_ERROR(index_->Sync());
  stats_.index_bytes = index_->FileBytes();
  return absl::OkStatus();
}

absl::Status DiskTier::ReconcileSegment(Segment& segment, uint64_t from_offset, IoEngine& engine) {
  const uint64_t segment_id = segment.file->id();
  std::map<uint64_t, uint64_t> indexed;  // offset -> record bytes, of indexed records
  for (const auto& [key, chunk] : chunks_) {
    if (chunk.entry.segment_id == segment_id && chunk.entry.offset >= from_offset) {
      indexed[chunk.entry.offset] = RecordBytes(chunk.entry.payload_bytes);
    }
  }
  AlignedBuffer header_block(kRecordHeaderBytes);
  uint64_t offset = from_offset;
  while (offset < segment.size_bytes) {
    if (auto it = indexed.find(offset); it != indexed.end()) {
      offset += it->second;
      continue;
    }
    const IoRequest read{.op = IoOp::kRead,
                         .fd = segment.file->fd(),
                         .offset = offset,
                         .data = header_block.data(),
                         .size_bytes = static_cast<uint32_t>(kRecordHeaderBytes)};
    STRATA_ASSIGN_OR_RETURN(const std::vector<int64_t> results,
                            RunToCompletion(engine, {&read, 1}));
    absl::StatusOr<RecordHeader> header = results[0] == static_cast<int64_t>(kRecordHeaderBytes)
                                              ? DecodeRecordHeader(header_block.span())
                                              : absl::DataLossError("short header");
    bool valid = header.ok() && offset + RecordBytes(header->payload_bytes) <= segment.size_bytes;
    if (valid) {
      AlignedBuffer payload(header->payload_bytes);
      const std::span<std::byte> parts[] = {
          payload.span().first(static_cast<size_t>(header->payload_bytes))};
      absl::StatusOr<uint64_t> checksum = ReadPayload(
          engine, segment.file->fd(), offset + kRecordHeaderBytes, parts, options_.max_io_bytes);
      valid = checksum.ok() && *checksum == header->payload_checksum;
    }
    if (valid) {
      // Durable but never indexed: its Put died between fdatasync and the index write.
      if (!chunks_.contains(header->key)) {
        const IndexEntry entry{.segment_id = segment_id,
                               .offset = offset,
                               .payload_bytes = header->payload_bytes,
                               .payload_checksum = header->payload_checksum,
                               .layout_fingerprint = header->layout_fingerprint,
                               .num_tokens = header->num_tokens,
                               .encoding = header->encoding,
                               .tenant = header->tenant};
        STRATA_RETURN_IF_ERROR(index_->Put(header->key, entry, {segment_id, offset}));
        chunks_[header->key] = Chunk{.entry = entry};
        ++stats_.recovered_records;
      }
      offset += RecordBytes(header->payload_bytes);
      continue;
    }
    // Torn or corrupt, so its length cannot be trusted: resume at the next indexed record, or
    // cut the segment here when none follows (nothing after this point was acknowledged).
    ++stats_.dropped_records;
    auto next = indexed.upper_bound(offset);
    if (next != indexed.end()) {
      offset = next->first;
      continue;
    }
    if (::ftruncate(segment.file->fd(), static_cast<off_t>(offset)) != 0) {
      return ErrnoToStatus(errno, fmt::format("disk tier: truncate {}", segment.file->path()));
    }
    segment.size_bytes = offset;
  }
  return absl::OkStatus();
}

}  // namespace strata::storage
