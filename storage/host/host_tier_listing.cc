// HostTier's reports on its contents: ListChunks (a resumable page of committed chunks), TenantOf
// and Stats.
#include "storage/host/host_tier.h"

#include "storage/host/internal/chunk_record.h"
#include "storage/host/internal/tenant_table.h"

namespace strata::storage {

std::string HostTier::TenantOf(const ChunkKey& key) const {
  absl::MutexLock lock(&mu_);
  const Record* record = FindLocked(key);
  if (record == nullptr || record->state != internal_host::ChunkState::kCommitted) return {};
  return std::string(tenants_->Name(record->tenant));
}

ChunkPage HostTier::ListChunks(const ListChunksOptions& options) const {
  ChunkPage page;
  absl::MutexLock lock(&mu_);
  uint16_t tenant = 0;
  if (options.tenant.has_value()) {
    tenant = tenants_->Find(*options.tenant);
    if (tenant == 0) return page;  // no chunk carries it: the listing is complete
  }
  size_t examined = 0;
  uint64_t last_seq = options.cursor;
  auto it = by_seq_.upper_bound(options.cursor);
  for (; it != by_seq_.end() && page.chunks.size() < options.limit && examined < options.max_scan;
       ++it, ++examined) {
    last_seq = it->first;
    const Record& record = *it->second;
    if (options.layout_fingerprint.has_value() &&
        record.key.layout_fingerprint() != *options.layout_fingerprint) {
      continue;
    }
    if (tenant != 0 && record.tenant != tenant) continue;
    page.chunks.push_back({.key = record.key,
                           .size_bytes = record.size_bytes,
                           .encoding = FormOfLocked(&record),
                           .num_tokens = record.num_tokens,
                           .hard_pinned = record.hard_pinned,
                           .soft_pin_deadline = record.soft_pin_deadline,
                           .leases = record.leases});
  }
  // The cursor is the last examined sequence number, so a page cut short by max_scan resumes
  // after what it skipped.
  if (it != by_seq_.end()) page.next_cursor = last_seq;
  return page;
}

HostTierStats HostTier::Stats() const {
  absl::MutexLock lock(&mu_);
  const MonoTime now = clock_->Now();
  const uint64_t page = options_.page_bytes;
  HostTierStats stats{
      .capacity_bytes = options_.capacity_bytes,
      .page_bytes = page,
      .used_bytes = uint64_t{allocator_.used_pages()} * page,
      .free_bytes = uint64_t{allocator_.free_pages()} * page,
      .payload_bytes = payload_bytes_,
      .reserved_bytes = reserved_bytes_,
      .chunks = chunks_,
      .reservations = reservations_,
      .hard_pinned_bytes = hard_pinned_bytes_,
      .active_leases = active_leases_,
      .hits = hits_,
      .misses = misses_,
      .evictions = evictions_,
      .evicted_bytes = evicted_bytes_,
      .checksum_failures = checksum_failures_,
      .removed = removed_,
      .removed_bytes = removed_bytes_,
      .commits = commits_,
      .committed_bytes = committed_bytes_,
      .hit_bytes = hit_bytes_,
      .encoded_chunks = encodings_.size(),
      .encoded_bytes = encoded_bytes_,
      .encoded_decoded_bytes = encoded_decoded_bytes_,
  };
  for (const Record* record : detached_) stats.pending_free_bytes += record->size_bytes;
  for (const auto& [expiry, record] : expiry_) {
    if (record->soft_pin_deadline > now) stats.soft_pinned_bytes += record->size_bytes;
    if (record->leases > 0 && record->lease_deadline > now)
      stats.leased_bytes += record->size_bytes;
  }
  return stats;
}

}  // namespace strata::storage
