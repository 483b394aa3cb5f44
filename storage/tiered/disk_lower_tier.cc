#include "storage/tiered/disk_lower_tier.h"

namespace strata::storage {

namespace {

LowerTier::ChunkInfo FromDisk(const DiskChunkInfo& info) {
  return {.payload_bytes = info.payload_bytes,
          .payload_checksum = info.payload_checksum,
          .num_tokens = info.num_tokens};
}

}  // namespace

std::optional<LowerTier::ChunkInfo> DiskLowerTier::Lookup(const ChunkKey& key) const {
  const std::optional<DiskChunkInfo> info = disk_->Lookup(key);
  if (!info.has_value()) return std::nullopt;
  return FromDisk(*info);
}

absl::StatusOr<LowerTier::ListPage> DiskLowerTier::List(const ListOptions& options) const {
  absl::StatusOr<DiskChunkPage> page =
      disk_->List({.after = options.after,
                   .limit = options.limit,
                   .layout_fingerprint = options.layout_fingerprint});
  if (!page.ok()) return page.status();
  ListPage listed{.resume_after = page->resume_after};
  listed.chunks.reserve(page->chunks.size());
  for (const auto& [key, info] : page->chunks) listed.chunks.push_back({key, FromDisk(info)});
  return listed;
}

std::vector<absl::Status> DiskLowerTier::PutBatch(std::span<const Put> puts) {
  std::vector<DiskPut> disk_puts;
  disk_puts.reserve(puts.size());
  for (const Put& put : puts) {
    disk_puts.push_back({.key = put.key,
                         .layout_fingerprint = put.key.layout_fingerprint(),
                         .payload = put.payload,
                         .payload_checksum = put.payload_checksum,
                         .num_tokens = put.num_tokens});
  }
  return disk_->PutBatch(disk_puts);
}

std::vector<absl::Status> DiskLowerTier::ReadBatch(std::span<const ChunkKey> keys,
                                                   std::span<const MutableParts> destinations) {
  return disk_->ReadBatch(keys, destinations);
}

absl::StatusOr<RemoveResult> DiskLowerTier::RemoveIf(
    absl::FunctionRef<bool(const ChunkKey&)> predicate) {
  absl::StatusOr<DiskTier::RemovedChunks> removed = disk_->RemoveIf(predicate);
  if (!removed.ok()) return removed.status();
  return RemoveResult{.chunks = removed->chunks, .bytes = removed->payload_bytes};
}

LowerTierStats DiskLowerTier::Stats() const {
  const DiskTierStats disk = disk_->stats();
  return {.tier = Tier::kDisk,
          .capacity_bytes = disk.capacity_bytes,
          .used_bytes = disk.used_bytes(),
          .payload_bytes = disk.payload_bytes,
          .chunks = disk.chunks,
          .reads = disk.reads,
          .read_bytes = disk.read_bytes,
          .writes = disk.writes,
          .written_bytes = disk.written_bytes,
          .evictions = disk.evictions,
          .corrupt_evictions = disk.dropped_records,
          .checksum_failures = disk.checksum_failures,
          .io_errors = disk.io_errors};
}

}  // namespace strata::storage
