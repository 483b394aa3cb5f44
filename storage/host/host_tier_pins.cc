// HostTier's pins: Pin, PinChunks, Unpin and UnpinChunks.
#include "storage/host/host_tier.h"

#include <algorithm>
#include <vector>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "storage/host/internal/chunk_record.h"

namespace strata::storage {
namespace {

using internal_host::ChunkState;

}  // namespace

absl::Status HostTier::Pin(const ChunkKey& key, const PinOptions& options) {
  STRATA_ASSIGN_OR_RETURN(PinResult result, PinChunks({&key, 1}, options));
  if (result.missing > 0) {
    return absl::InvalidArgumentError(
        fmt::format("host tier: pin: no committed chunk {}", key.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PinResult> HostTier::PinChunks(std::span<const ChunkKey> keys,
                                              const PinOptions& options) {
  for (const ChunkKey& key : keys) {
    if (key.empty()) return absl::InvalidArgumentError("host tier: pin: empty chunk key");
  }
  if (options.kind == PinKind::kSoft && options.ttl.count() <= 0) {
    return absl::InvalidArgumentError("host tier: soft pin: ttl must be positive");
  }
  absl::MutexLock lock(&mu_);
  PinResult result;
  std::vector<Record*> records;
  uint64_t new_hard_bytes = 0;
  for (const ChunkKey& key : keys) {
    Record* record = FindLocked(key);
    if (record == nullptr || record->state != ChunkState::kCommitted) {
      ++result.missing;
      continue;
    }
    // A key listed twice counts once against the quota.
    if (std::find(records.begin(), records.end(), record) != records.end()) continue;
    records.push_back(record);
    ++result.chunks;
    result.bytes += record->size_bytes;
    if (!record->hard_pinned) new_hard_bytes += record->size_bytes;
  }
  if (options.kind == PinKind::kHard &&
      hard_pinned_bytes_ + new_hard_bytes > options_.hard_pin_quota_bytes) {
    return absl::ResourceExhaustedError(fmt::format(
        "host tier: hard pin of {} chunks ({} more bytes) exceeds the quota: {} of {} bytes "
        "pinned; nothing was pinned",
        records.size(), new_hard_bytes, hard_pinned_bytes_, options_.hard_pin_quota_bytes));
  }
  const MonoTime now = clock_->Now();
  for (Record* record : records) {
    if (options.kind == PinKind::kHard) {
      if (!record->hard_pinned) {
        record->hard_pinned = true;
        hard_pinned_bytes_ += record->size_bytes;
      }
    } else {
      record->soft_pin_deadline = std::max(record->soft_pin_deadline, now + options.ttl);
    }
    UpdateProtectionLocked(record, now);
  }
  return result;
}

absl::Status HostTier::Unpin(const ChunkKey& key, PinKind kind) {
  STRATA_ASSIGN_OR_RETURN(PinResult result, UnpinChunks({&key, 1}, kind));
  if (result.missing > 0) {
    return absl::InvalidArgumentError(
        fmt::format("host tier: unpin: no committed chunk {}", key.ToString()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PinResult> HostTier::UnpinChunks(std::span<const ChunkKey> keys, PinKind kind) {
  for (const ChunkKey& key : keys) {
    if (key.empty()) return absl::InvalidArgumentError("host tier: unpin: empty chunk key");
  }
  absl::MutexLock lock(&mu_);
  PinResult result;
  const MonoTime now = clock_->Now();
  for (const ChunkKey& key : keys) {
    Record* record = FindLocked(key);
    if (record == nullptr || record->state != ChunkState::kCommitted) {
      ++result.missing;
      continue;
    }
    ++result.chunks;
    result.bytes += record->size_bytes;
    if (kind == PinKind::kHard) {
      if (record->hard_pinned) {
        record->hard_pinned = false;
        hard_pinned_bytes_ -= record->size_bytes;
      }
    } else {
      record->soft_pin_deadline = MonoTime{0};
    }
    UpdateProtectionLocked(record, now);
  }
  return result;
}

}  // namespace strata::storage
