// Writing chunks: WriteReservation, and HostTier's Reserve, Commit, Abort and the admission
// switch that gates Reserve.
#include "storage/host/host_tier.h"

#include <optional>
#include <utility>
#include <vector>

#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/host/internal/chunk_record.h"
#include "storage/host/internal/host_tier_inline.h"
#include "storage/host/internal/tenant_table.h"

namespace strata::storage {
namespace {

using internal_host::ChunkState;
using internal_host::IdOf;
using internal_host::PagesOf;

}  // namespace

// ---------------------------------------------------------------------------------------------
// WriteReservation

WriteReservation::WriteReservation(WriteReservation&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)),
      handle_(other.handle_),
      key_(other.key_),
      size_bytes_(other.size_bytes_),
      num_tokens_(other.num_tokens_),
      owner_(other.owner_),
      base_(other.base_),
      ranges_(std::move(other.ranges_)) {}

WriteReservation& WriteReservation::operator=(WriteReservation&& other) noexcept {
  if (this != &other) {
    Reset();
    tier_ = std::exchange(other.tier_, nullptr);
    handle_ = other.handle_;
    key_ = other.key_;
    size_bytes_ = other.size_bytes_;
    num_tokens_ = other.num_tokens_;
    owner_ = other.owner_;
    base_ = other.base_;
    ranges_ = std::move(other.ranges_);
  }
  return *this;
}

WriteReservation::~WriteReservation() { Reset(); }

void WriteReservation::Reset() {
  if (HostTier* tier = std::exchange(tier_, nullptr)) tier->AbortHandle(handle_);
}

// ---------------------------------------------------------------------------------------------
// Reserve, commit and abort

absl::StatusOr<ReserveResult> HostTier::Reserve(const KvLayout& layout, const ChunkKey& key,
                                                const ReserveOptions& options) {
  if (absl::Status status = layout.Validate(); !status.ok()) {
    return Annotate(status, "host tier: reserve");
  }
  if (key.empty()) return absl::InvalidArgumentError("host tier: reserve: empty chunk key");
  if (key.layout_fingerprint() != layout.Fingerprint()) {
    return absl::InvalidArgumentError(fmt::format(
        "host tier: reserve: key {} was made for layout {:016x}, not for {} ({:016x})",
        key.ToString(), key.layout_fingerprint(), layout.DebugString(), layout.Fingerprint()));
  }
  if (options.num_tokens == 0 || options.num_tokens > layout.chunk_tokens) {
    return absl::InvalidArgumentError(
        fmt::format("host tier: reserve: num_tokens {} outside [1, {}]", options.num_tokens,
                    layout.chunk_tokens));
  }
  return ReserveSized(key, layout.chunk_bytes(options.num_tokens), options);
}

absl::StatusOr<ReserveResult> HostTier::ReserveSized(const ChunkKey& key, uint64_t size_bytes,
                                                     const ReserveOptions& options) {
  if (key.empty()) return absl::InvalidArgumentError("host tier: reserve: empty chunk key");
  if (size_bytes == 0 || options.num_tokens == 0) {
    return absl::InvalidArgumentError(
        fmt::format("host tier: reserve of chunk {}: {} bytes of {} tokens", key.ToString(),
                    size_bytes, options.num_tokens));
  }
  if (size_bytes > options_.capacity_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("host tier: reserve: a chunk of {} bytes exceeds the tier's capacity of {}",
                    size_bytes, options_.capacity_bytes));
  }
  const uint32_t num_pages = PagesFor(size_bytes);

  absl::MutexLock lock(&mu_);
  if (!admitting_) {
    return absl::FailedPreconditionError(
        fmt::format("host tier: reserve of chunk {}: the tier is draining and admits no new chunks",
                    key.ToString()));
  }
  Shard& shard = ShardFor(key);
  Record* record = nullptr;
  ReserveResult result;
  {
    absl::MutexLock shard_lock(&shard.mu);
    if (auto it = shard.records.find(key); it != shard.records.end()) {
      result.outcome = (*it)->state == ChunkState::kReserved ? ReserveOutcome::kInProgress
                                                             : ReserveOutcome::kAlreadyPresent;
      return result;
    }
    uint16_t tenant = 0;
    if (options.tenant_name.has_value()) {
      tenant = tenants_->Acquire(*options.tenant_name);
      if (tenant == 0) {
        return absl::ResourceExhaustedError(fmt::format(
            "host tier: reserve of chunk {}: {} other tenants have chunks here, the most the "
            "tier records",
            key.ToString(), internal_host::TenantTable::kMaxTenants));
      }
    }
    record = new Record{
        .key = key, .size_bytes = size_bytes, .num_tokens = options.num_tokens, .tenant = tenant};
    shard.records.insert(record);
  }
  // The record (kReserved, no pages yet) claims the key while pages are found; allocation may
  // release mu_ to call the eviction listener.
  absl::StatusOr<ExtentList> extents = AllocateLocked(num_pages, size_bytes);
  if (!extents.ok()) {
    {
      absl::MutexLock shard_lock(&shard.mu);
      shard.records.erase(record);
    }
    tenants_->Release(record->tenant);
    delete record;
    return extents.status();
  }
  record->extents = *std::move(extents);
  const uint64_t handle = next_handle_++;
  handles_.emplace(handle,
                   Handle{.record = record,
                          .owner = options.owner,
                          .is_lease = false,
                          .partial = options.partial,
                          .reused = options.reused,
                          .quota_id = QuotaIdOf(options.tenant_name),
                          .parent = options.parent,
                          .token_ids = {options.token_ids.begin(), options.token_ids.end()}});
  ++bound_handles_;
  ++reservations_;
  reserved_bytes_ += size_bytes;

  result.outcome = ReserveOutcome::kReserved;
  WriteReservation& reservation = result.reservation;
  reservation.tier_ = this;
  reservation.handle_ = handle;
  reservation.key_ = key;
  reservation.size_bytes_ = size_bytes;
  reservation.num_tokens_ = options.num_tokens;
  reservation.owner_ = options.owner;
  reservation.base_ = arena_->base();
  reservation.ranges_ = RangesFor(*record);
  return result;
}

absl::Status HostTier::Commit(WriteReservation&& reservation,
                              std::optional<uint64_t> writer_checksum) {
  if (!reservation.valid()) {
    return absl::InvalidArgumentError("host tier: commit of an empty reservation");
  }
  if (reservation.tier_ != this) {
    return absl::InvalidArgumentError(
        fmt::format("host tier: commit of chunk {}: the reservation belongs to another tier",
                    reservation.key().ToString()));
  }
  WriteReservation consumed = std::move(reservation);
  consumed.tier_ = nullptr;
  const uint64_t checksum = writer_checksum.has_value()
                                ? *writer_checksum
                                : ChecksumRanges(consumed.base_, consumed.ranges_);

  absl::MutexLock lock(&mu_);
  --bound_handles_;
  auto it = handles_.find(consumed.handle_);
  if (it == handles_.end()) {
    return absl::AbortedError(fmt::format(
        "host tier: commit of chunk {}: the reservation was aborted (its owner {} was aborted)",
        consumed.key().ToString(), consumed.owner()));
  }
  const Handle handle = std::move(it->second);
  handles_.erase(it);
  Record* record = handle.record;
  record->checksum = checksum;
  --reservations_;
  reserved_bytes_ -= record->size_bytes;
  {
    Shard& shard = ShardFor(record->key);
    absl::MutexLock shard_lock(&shard.mu);
    record->state = ChunkState::kCommitted;
  }
  committed_pages_ += PagesOf(*record);
  payload_bytes_ += record->size_bytes;
  ++chunks_;
  ++commits_;
  committed_bytes_ += record->size_bytes;
  record->seq = next_seq_++;
  by_seq_.emplace(record->seq, record);
  ChunkId parent = kNoChunk;
  if (!handle.parent.empty()) {
    const Record* parent_record = FindLocked(handle.parent);
    if (parent_record != nullptr && parent_record->state == ChunkState::kCommitted) {
      parent = IdOf(parent_record);
    }
  }
  policy_->OnInsert({.id = IdOf(record),
                     .key_hash = record->key.ShortHash(),
                     .size_bytes = record->size_bytes,
                     .parent = parent,
                     .partial = handle.partial,
                     .reused = handle.reused,
                     .tenant = handle.quota_id});
  if (observer_ != nullptr) {
    observer_->OnStored(record->key, handle.parent, record->num_tokens, handle.token_ids);
  }
  return absl::OkStatus();
}

void HostTier::Abort(WriteReservation&& reservation) {
  WriteReservation consumed = std::move(reservation);
}

void HostTier::AbortHandle(uint64_t handle_id) {
  absl::MutexLock lock(&mu_);
  --bound_handles_;
  AbortLocked(handle_id);
}

void HostTier::AbortLocked(uint64_t handle_id) {
  auto it = handles_.find(handle_id);
  if (it == handles_.end()) return;
  Record* record = it->second.record;
  handles_.erase(it);
  --reservations_;
  reserved_bytes_ -= record->size_bytes;
  {
    Shard& shard = ShardFor(record->key);
    absl::MutexLock shard_lock(&shard.mu);
    shard.records.erase(record);
    record->state = ChunkState::kDropped;
  }
  tenants_->Release(std::exchange(record->tenant, 0));
  FreePagesLocked(record);
  MaybeDestroyLocked(record);
}

size_t HostTier::AbortOwner(uint64_t owner) {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& [id, handle] : handles_) {
    if (!handle.is_lease && handle.owner == owner) ids.push_back(id);
  }
  for (uint64_t id : ids) AbortLocked(id);
  return ids.size();
}

// ---------------------------------------------------------------------------------------------
// Admission

void HostTier::StopAdmitting() {
  absl::MutexLock lock(&mu_);
  admitting_ = false;
}

bool HostTier::admitting() const {
  absl::MutexLock lock(&mu_);
  return admitting_;
}

}  // namespace strata::storage
