// The forms of committed chunks: HostTier::ReplaceForm (a chunk stored encoded, or plain again,
// in place) and the record of each encoded chunk's form.
#include <cstring>
#include <utility>

#include "core/check.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "storage/host/host_tier.h"
#include "storage/host/internal/chunk_record.h"
#include "storage/host/internal/host_tier_inline.h"
#include "storage/host/internal/tenant_table.h"

namespace strata::storage {
namespace {

using internal_host::ChunkState;
using internal_host::IdOf;
using internal_host::PagesOf;

}  // namespace

void HostTier::SetFormLocked(Record* record, const StoredEncoding& encoding) {
  if (record->encoded) {
    auto it = encodings_.find(record);
    encoded_bytes_ -= record->size_bytes;
    encoded_decoded_bytes_ -= it->second.decoded_bytes;
    encodings_.erase(it);
  }
  if (encoding.encoded()) {
    encodings_.emplace(record, encoding);
    encoded_bytes_ += record->size_bytes;
    encoded_decoded_bytes_ += encoding.decoded_bytes;
  }
  if (record->encoded != encoding.encoded()) {
    Shard& shard = ShardFor(record->key);
    absl::MutexLock lock(&shard.mu);  // HoldsEncoded reads the flag under it
    record->encoded = encoding.encoded();
  }
}

StoredEncoding HostTier::FormOfLocked(const Record* record) const {
  if (!record->encoded) return {};
  return encodings_.at(record);
}

absl::StatusOr<HostTier::Record*> HostTier::ReplaceableLocked(const ChunkLease& lease) const {
  auto it = handles_.find(lease.handle_);
  if (it == handles_.end()) {
    return absl::AbortedError(fmt::format(
        "host tier: replace form of chunk {}: the lease was released", lease.key().ToString()));
  }
  Record* record = it->second.record;
  if (record->state != ChunkState::kCommitted) {
    return absl::AbortedError(fmt::format(
        "host tier: replace form of chunk {}: the chunk was removed", lease.key().ToString()));
  }
  if (lease.expired()) {
    return absl::AbortedError(fmt::format(
        "host tier: replace form of chunk {}: the lease has expired", lease.key().ToString()));
  }
  if (record->leases > 1) {
    return absl::UnavailableError(
        fmt::format("host tier: replace form of chunk {}: {} other leases read it",
                    lease.key().ToString(), record->leases - 1));
  }
  return record;
}

absl::Status HostTier::CheckPinQuotaLocked(const Record& record, uint64_t size_bytes) const {
  if (!record.hard_pinned ||
      hard_pinned_bytes_ - record.size_bytes + size_bytes <= options_.hard_pin_quota_bytes) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(fmt::format(
      "host tier: replace form of chunk {}: its hard pin at {} bytes would exceed the quota",
      record.key.ToString(), size_bytes));
}

absl::Status HostTier::CheckReplacement(const ChunkLease& lease, uint64_t size_bytes) const {
  if (!lease.valid() || lease.tier_ != this) {
    return absl::InvalidArgumentError(
        "host tier: replace form: an empty lease, or one of another tier");
  }
  if (size_bytes == 0 || size_bytes > options_.capacity_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("host tier: replace form of chunk {}: a form of {} bytes",
                    lease.key().ToString(), size_bytes));
  }
  return absl::OkStatus();
}

bool HostTier::HoldsEncoded(const ChunkKey& key) const {
  if (key.empty()) return false;
  const Shard& shard = ShardFor(key);
  absl::ReaderMutexLock lock(&shard.mu);
  auto it = shard.records.find(key);
  return it != shard.records.end() && (*it)->state == ChunkState::kCommitted && (*it)->encoded;
}

absl::Status HostTier::CheckReplaceable(const ChunkLease& lease) const {
  if (!lease.valid() || lease.tier_ != this) {
    return absl::InvalidArgumentError(
        "host tier: replace form: an empty lease, or one of another tier");
  }
  absl::MutexLock lock(&mu_);
  return ReplaceableLocked(lease).status();
}

absl::Status HostTier::ReplaceForm(ChunkLease& lease, std::span<const std::byte> payload,
                                   const StoredEncoding& encoding) {
  STRATA_RETURN_IF_ERROR(CheckReplacement(lease, payload.size()));
  const uint64_t checksum = ChecksumBytes(payload);
  const uint32_t num_pages = PagesFor(payload.size());
  Replacement replacement;
  {
    absl::MutexLock lock(&mu_);
    STRATA_ASSIGN_OR_RETURN(Record * record, ReplaceableLocked(lease));
    STRATA_RETURN_IF_ERROR(CheckPinQuotaLocked(*record, payload.size()));
    if (num_pages <= PagesOf(*record) && allocator_.free_pages() < num_pages) {
      // Free pages cannot hold it but the chunk's own can: they are freed and the payload is
      // copied into pages of theirs, all under the lock (no reader can lease it meanwhile), so a
      // form that shrinks never evicts another chunk.
      allocator_.Free(record->extents);
      record->extents.clear();
      absl::StatusOr<ExtentList> own = allocator_.Allocate(num_pages);
      STRATA_CHECK_MSG(own.ok(), "host tier: the pages a chunk freed cannot be allocated again");
      MutablePayloadView(arena_->base(), RangesOf(*own, payload.size()), payload.size())
          .CopyFrom(payload);
      SwapFormLocked(record, *std::move(own), payload.size(), checksum, encoding, lease);
      return absl::OkStatus();
    }
    // Free pages hold it (no eviction), or it grows: copied with no lock held.
    STRATA_ASSIGN_OR_RETURN(replacement, BeginReplacementLocked(payload.size()));
  }
  return FinishReplacement(lease, std::move(replacement), payload.size(), checksum, encoding,
                           [payload](const MutablePayloadView& pages) {
                             pages.CopyFrom(payload);
                             return absl::OkStatus();
                           });
}

absl::Status HostTier::ReplaceForm(ChunkLease& lease, uint64_t size_bytes, uint64_t checksum,
                                   const StoredEncoding& encoding, FormWriter write) {
  STRATA_RETURN_IF_ERROR(CheckReplacement(lease, size_bytes));
  Replacement replacement;
  {
    absl::MutexLock lock(&mu_);
    STRATA_ASSIGN_OR_RETURN(Record * record, ReplaceableLocked(lease));
    STRATA_RETURN_IF_ERROR(CheckPinQuotaLocked(*record, size_bytes));
    STRATA_ASSIGN_OR_RETURN(replacement, BeginReplacementLocked(size_bytes));
  }
  return FinishReplacement(lease, std::move(replacement), size_bytes, checksum, encoding, write);
}

absl::StatusOr<HostTier::Replacement> HostTier::BeginReplacementLocked(uint64_t size_bytes) {
  Replacement replacement;
  // May release mu_ to hand evicted chunks to the listener: FinishReplacement checks the chunk
  // again.
  STRATA_ASSIGN_OR_RETURN(replacement.extents, AllocateLocked(PagesFor(size_bytes), size_bytes));
  replacement.call = next_handle_++;
  replacing_.emplace(replacement.call, replacement.extents);
  return replacement;
}

absl::Status HostTier::FinishReplacement(ChunkLease& lease, Replacement replacement,
                                         uint64_t size_bytes, uint64_t checksum,
                                         const StoredEncoding& encoding, FormWriter write) {
  // The new pages are this call's alone: filled with no lock held, while the lease keeps the
  // chunk's own pages for `write` to read.
  const ArenaRangeList ranges = RangesOf(replacement.extents, size_bytes);
  const absl::Status written = write(MutablePayloadView(arena_->base(), ranges, size_bytes));

  absl::MutexLock lock(&mu_);
  replacing_.erase(replacement.call);
  absl::StatusOr<Record*> replaceable = ReplaceableLocked(lease);
  if (replaceable.ok()) {
    if (absl::Status quota = CheckPinQuotaLocked(**replaceable, size_bytes); !quota.ok()) {
      replaceable = quota;
    }
  }
  if (!written.ok()) replaceable = written;
  if (!replaceable.ok()) {
    allocator_.Free(replacement.extents);
    pages_freed_.SignalAll();
    return replaceable.status();
  }
  SwapFormLocked(*replaceable, std::move(replacement.extents), size_bytes, checksum, encoding,
                 lease);
  return absl::OkStatus();
}

void HostTier::SwapFormLocked(Record* record, ExtentList extents, uint64_t size_bytes,
                              uint64_t checksum, const StoredEncoding& encoding,
                              ChunkLease& lease) {
  const uint32_t old_pages = PagesOf(*record);  // 0 when they were freed already
  const uint32_t old_committed_pages = PagesFor(record->size_bytes);
  policy_->OnRemove(IdOf(record));
  if (record->unevictable) {
    unevictable_pages_ -= old_committed_pages;
    record->unevictable = false;
  }
  SetFormLocked(record, StoredEncoding{});
  if (record->hard_pinned) hard_pinned_bytes_ += size_bytes - record->size_bytes;
  committed_pages_ -= old_committed_pages;
  committed_pages_ += PagesFor(size_bytes);
  payload_bytes_ += size_bytes - record->size_bytes;
  if (old_pages > 0) allocator_.Free(record->extents);
  pages_freed_.SignalAll();
  record->extents = std::move(extents);
  record->size_bytes = size_bytes;
  record->checksum = checksum;
  SetFormLocked(record, encoding);
  policy_->OnInsert({.id = IdOf(record),
                     .key_hash = record->key.ShortHash(),
                     .size_bytes = record->size_bytes,
                     .reused = true,
                     .tenant = QuotaIdOf(tenants_->Name(record->tenant))});
  UpdateProtectionLocked(record, clock_->Now());

  lease.size_bytes_ = record->size_bytes;
  lease.checksum_ = checksum;
  lease.encoding_ = encoding;
  lease.ranges_ = RangesFor(*record);
}

}  // namespace strata::storage
