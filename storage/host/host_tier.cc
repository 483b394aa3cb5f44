// HostTier's construction and the helpers its other files share: finding a chunk, protection by
// leases and pins, taking a chunk out of the index, and allocation with eviction.
#include "storage/host/host_tier.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/host/internal/chunk_record.h"
#include "storage/host/internal/host_tier_inline.h"
#include "storage/host/internal/tenant_table.h"

namespace strata::storage {
namespace {

using internal_host::ChunkState;
using internal_host::IdOf;
using internal_host::kNumShards;
using internal_host::PagesOf;
using internal_host::RecordOf;

// The quota id of each tenant of `quotas`: from 1, in the map's order.
absl::flat_hash_map<std::string, uint32_t> QuotaIds(const std::map<std::string, uint64_t>& quotas) {
  absl::flat_hash_map<std::string, uint32_t> ids;
  for (const auto& [tenant, bytes] : quotas) {
    ids.emplace(tenant, static_cast<uint32_t>(ids.size() + 1));
  }
  return ids;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Creation

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Create(const HostTierOptions& options) {
  if (options.page_bytes == 0 || options.page_bytes % 64 != 0) {
    return absl::InvalidArgumentError(fmt::format(
        "host tier: page_bytes {} must be a positive multiple of 64", options.page_bytes));
  }
  if (options.capacity_bytes == 0 || options.capacity_bytes % options.page_bytes != 0) {
    return absl::InvalidArgumentError(
        fmt::format("host tier: capacity_bytes {} must be a positive multiple of page_bytes {}",
                    options.capacity_bytes, options.page_bytes));
  }
  if (options.capacity_bytes / options.page_bytes > UINT32_MAX) {
    return absl::InvalidArgumentError(
        fmt::format("host tier: {} pages of {} bytes exceed the 2^32-page limit; use larger pages",
                    options.capacity_bytes / options.page_bytes, options.page_bytes));
  }
  if (options.default_lease.count() <= 0) {
    return absl::InvalidArgumentError("host tier: default_lease must be positive");
  }
  if (options.verify_every_n_loads == 0) {
    return absl::InvalidArgumentError(
        "host tier: verify_every_n_loads must be at least 1 (1 verifies every load)");
  }
  if (options.clock == nullptr) return absl::InvalidArgumentError("host tier: clock is null");
  STRATA_RETURN_IF_ERROR(
      Annotate(CheckTenantQuotas(options.tenant_quotas, options.capacity_bytes), "host tier"));
  absl::flat_hash_map<std::string, uint32_t> quota_ids = QuotaIds(options.tenant_quotas);
  std::vector<TenantQuota> quotas_by_id;
  for (const auto& [tenant, bytes] : options.tenant_quotas) {
    quotas_by_id.push_back({.tenant = quota_ids.at(tenant), .bytes = bytes});
  }
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<EvictionPolicy> policy,
      MakeEvictionPolicy(options.policy, {.capacity_bytes = options.capacity_bytes,
                                          .tenant_quotas = std::move(quotas_by_id)}));
  absl::StatusOr<std::unique_ptr<SharedArena>> arena =
      SharedArena::Create({.size_bytes = options.capacity_bytes,
                           .use_hugepages = options.use_hugepages,
                           .prefault = options.prefault,
                           .name = options.arena_name});
  if (!arena.ok()) return Annotate(arena.status(), "host tier");
  return std::unique_ptr<HostTier>(
      new HostTier(options, *std::move(arena), std::move(policy), std::move(quota_ids)));
}

absl::Status HostTier::CheckTenantQuotas(const std::map<std::string, uint64_t>& quotas,
                                         uint64_t capacity_bytes) {
  for (const auto& [tenant, bytes] : quotas) {
    if (tenant.empty() || bytes == 0 || bytes > capacity_bytes) {
      return absl::InvalidArgumentError(
          fmt::format("tenant quota '{}' = {} must name a tenant and lie in (0, capacity {}]",
                      tenant, bytes, capacity_bytes));
    }
  }
  return absl::OkStatus();
}

HostTier::HostTier(const HostTierOptions& options, std::unique_ptr<SharedArena> arena,
                   std::unique_ptr<EvictionPolicy> policy,
                   absl::flat_hash_map<std::string, uint32_t> quota_ids)
    : options_(options),
      clock_(options.clock),
      listener_(options.listener),
      observer_(options.observer),
      arena_(std::move(arena)),
      shards_(new Shard[kNumShards]),
      quota_ids_(std::move(quota_ids)),
      tenants_(std::make_unique<internal_host::TenantTable>()),
      allocator_(static_cast<uint32_t>(options.capacity_bytes / options.page_bytes)),
      policy_(std::move(policy)) {}

HostTier::~HostTier() {
  absl::MutexLock lock(&mu_);
  STRATA_CHECK_MSG(bound_handles_ == 0,
                   "HostTier destroyed while a WriteReservation or ChunkLease is alive");
  for (size_t i = 0; i < kNumShards; ++i) {
    absl::MutexLock shard_lock(&shards_[i].mu);
    for (Record* record : shards_[i].records) delete record;
    shards_[i].records.clear();
  }
  for (Record* record : detached_) delete record;
}

// ---------------------------------------------------------------------------------------------
// Helpers

uint32_t HostTier::QuotaIdOf(std::optional<std::string_view> tenant) const {
  if (!tenant.has_value()) return 0;
  auto it = quota_ids_.find(absl::string_view(tenant->data(), tenant->size()));
  return it == quota_ids_.end() ? 0 : it->second;
}

HostTier::Record* HostTier::FindLocked(const ChunkKey& key) const {
  Shard& shard = ShardFor(key);
  absl::ReaderMutexLock lock(&shard.mu);
  auto it = shard.records.find(key);
  return it == shard.records.end() ? nullptr : *it;
}

ArenaRangeList HostTier::RangesFor(const Record& record) const {
  return RangesOf(record.extents, record.size_bytes);
}

ArenaRangeList HostTier::RangesOf(const ExtentList& extents, uint64_t size_bytes) const {
  ArenaRangeList ranges;
  uint64_t remaining = size_bytes;
  for (const Extent& extent : extents) {
    const uint64_t length =
        std::min<uint64_t>(uint64_t{extent.num_pages} * options_.page_bytes, remaining);
    ranges.push_back({uint64_t{extent.first_page} * options_.page_bytes, length});
    remaining -= length;
  }
  return ranges;
}

void HostTier::UpdateProtectionLocked(Record* record, MonoTime now) {
  STRATA_DCHECK(record->state == ChunkState::kCommitted);
  const MonoTime timed = std::max(record->leases > 0 ? record->lease_deadline : MonoTime{0},
                                  record->soft_pin_deadline);
  const bool timed_active = timed > now;
  if (record->in_expiry && (!timed_active || record->expiry != timed)) {
    expiry_.erase({record->expiry, record});
    record->in_expiry = false;
  }
  if (timed_active && !record->in_expiry) {
    expiry_.emplace(timed, record);
    record->expiry = timed;
    record->in_expiry = true;
  }
  const bool protect = record->hard_pinned || timed_active;
  if (protect != record->unevictable) {
    record->unevictable = protect;
    policy_->SetEvictable(IdOf(record), !protect);
    if (protect) {
      unevictable_pages_ += PagesOf(*record);
    } else {
      unevictable_pages_ -= PagesOf(*record);
    }
  }
}

void HostTier::SweepExpiredLocked(MonoTime now) {
  while (!expiry_.empty() && expiry_.begin()->first <= now) {
    UpdateProtectionLocked(expiry_.begin()->second, now);
  }
}

void HostTier::DetachLocked(Record* record, RemovalCause cause, bool notify) {
  STRATA_DCHECK(record->state == ChunkState::kCommitted);
  {
    Shard& shard = ShardFor(record->key);
    absl::MutexLock lock(&shard.mu);
    shard.records.erase(record);
    record->state = ChunkState::kDropped;
  }
  if (cause != RemovalCause::kEvicted) policy_->OnRemove(IdOf(record));
  if (notify && observer_ != nullptr) observer_->OnRemoved(record->key, cause);
  by_seq_.erase(record->seq);
  tenants_->Release(std::exchange(record->tenant, 0));
  SetFormLocked(record, StoredEncoding{});
  const uint32_t pages = PagesOf(*record);
  if (record->in_expiry) {
    expiry_.erase({record->expiry, record});
    record->in_expiry = false;
  }
  if (record->unevictable) {
    unevictable_pages_ -= pages;
    record->unevictable = false;
  }
  if (record->hard_pinned) {
    hard_pinned_bytes_ -= record->size_bytes;
    record->hard_pinned = false;
  }
  record->soft_pin_deadline = MonoTime{0};
  committed_pages_ -= pages;
  payload_bytes_ -= record->size_bytes;
  --chunks_;
}

void HostTier::DropLocked(Record* record, MonoTime now, RemovalCause cause, bool notify) {
  DetachLocked(record, cause, notify);
  if (record->leases > 0 && record->lease_deadline > now) {
    detached_.insert(record);
  } else {
    FreePagesLocked(record);
    MaybeDestroyLocked(record);
  }
}

void HostTier::FreePagesLocked(Record* record) {
  detached_.erase(record);
  if (record->extents.empty()) return;
  allocator_.Free(record->extents);
  record->extents.clear();
}

// ---------------------------------------------------------------------------------------------
// Allocation and eviction

void HostTier::ReclaimDetachedLocked(MonoTime now) {
  std::vector<Record*> expired;
  for (Record* record : detached_) {
    if (record->state == ChunkState::kDropped && record->lease_deadline <= now) {
      expired.push_back(record);
    }
  }
  for (Record* record : expired) {
    FreePagesLocked(record);
    MaybeDestroyLocked(record);
  }
}

std::string HostTier::ExhaustedMessageLocked(uint64_t size_bytes, uint32_t num_pages,
                                             MonoTime now) const {
  uint64_t soft_pinned = 0;
  uint64_t leased = 0;
  for (const auto& [expiry, record] : expiry_) {
    if (record->soft_pin_deadline > now) soft_pinned += record->size_bytes;
    if (record->leases > 0 && record->lease_deadline > now) leased += record->size_bytes;
  }
  uint64_t pending = 0;
  for (const Record* record : detached_) pending += record->size_bytes;
  const uint64_t page = options_.page_bytes;
  return fmt::format(
      "host tier: no room for a chunk of {} bytes ({} pages of {}): capacity {} bytes, free {}, "
      "evictable {}; held by hard pins {} bytes, soft pins {}, unexpired leases {}, open "
      "reservations {}, removed or evicted chunks not yet released {} (a chunk may count under "
      "several)",
      size_bytes, num_pages, page, options_.capacity_bytes,
      uint64_t{allocator_.free_pages()} * page, (committed_pages_ - unevictable_pages_) * page,
      hard_pinned_bytes_, soft_pinned, leased, reserved_bytes_, pending);
}

absl::StatusOr<ExtentList> HostTier::AllocateLocked(uint32_t num_pages, uint64_t size_bytes) {
  bool swept = false;
  while (allocator_.free_pages() < num_pages) {
    const MonoTime now = clock_->Now();
    if (!swept) {
      SweepExpiredLocked(now);
      ReclaimDetachedLocked(now);
      swept = true;
      continue;
    }
    const uint64_t shortfall = num_pages - allocator_.free_pages();
    const uint64_t evictable = committed_pages_ - unevictable_pages_;
    if (evictable + evicting_pages_ < shortfall) {
      return absl::ResourceExhaustedError(ExhaustedMessageLocked(size_bytes, num_pages, now));
    }
    if (evictable == 0) {
      // Only pages with the eviction listener can make room: wait for them.
      pages_freed_.Wait(&mu_);
      swept = false;
      continue;
    }
    std::vector<Record*> victims;
    std::vector<std::string> victim_tenants;   // for the listener; detaching frees the labels
    std::vector<StoredEncoding> victim_forms;  // for the listener; detaching forgets them
    uint64_t victim_pages = 0;
    while (victim_pages < shortfall) {
      const std::optional<ChunkId> id = policy_->PopVictim();
      if (!id.has_value()) break;
      Record* victim = RecordOf(*id);
      STRATA_DCHECK(!victim->unevictable && victim->state == ChunkState::kCommitted);
      if (listener_ != nullptr) {
        victim_tenants.emplace_back(tenants_->Name(victim->tenant));
        victim_forms.push_back(FormOfLocked(victim));
      }
      DetachLocked(victim, RemovalCause::kEvicted, /*notify=*/true);
      victim->state = ChunkState::kEvicting;
      detached_.insert(victim);
      victim_pages += PagesOf(*victim);
      ++evictions_;
      evicted_bytes_ += victim->size_bytes;
      victims.push_back(victim);
    }
    if (victims.empty()) {
      STRATA_DCHECK(false);
      return absl::InternalError(
          "host tier: the eviction policy has no victim for evictable pages");
    }
    if (listener_ != nullptr) {
      std::vector<ArenaRangeList> ranges;
      ranges.reserve(victims.size());
      for (const Record* victim : victims) ranges.push_back(RangesFor(*victim));
      evicting_pages_ += victim_pages;
      mu_.Unlock();
      for (size_t i = 0; i < victims.size(); ++i) {
        const Record& victim = *victims[i];
        listener_->OnEvicted(victim.key, PayloadView(arena_->base(), ranges[i], victim.size_bytes),
                             victim.checksum, victim.num_tokens, victim_tenants[i],
                             victim_forms[i]);
      }
      mu_.Lock();
      evicting_pages_ -= victim_pages;
    }
    for (Record* victim : victims) {
      victim->state = ChunkState::kDropped;
      FreePagesLocked(victim);
      MaybeDestroyLocked(victim);
    }
    if (listener_ != nullptr) pages_freed_.SignalAll();
  }
  return allocator_.Allocate(num_pages);
}

}  // namespace strata::storage
