#include "storage/host/host_tier.h"

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "core/check.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"

namespace strata::storage {
namespace internal_host {

enum class ChunkState : uint8_t {
  kReserved,   // in the index, invisible to lookups; pages written by its reservation's holder
  kCommitted,  // in the index and the policy; visible
  kEvicting,   // out of the index; pages held while the eviction listener reads them
  kDropped,    // out of the index; pages (if any) held until no unexpired lease reads them
};

// One chunk. Its address is its policy ChunkId. Fields are guarded by the tier lock, except
// `state`, which is written under the tier lock and the shard lock together (so a Lookup may
// read it under the shard lock alone), and the immutable-after-commit key, sizes and checksum.
struct ChunkRecord {
  ChunkKey key;
  uint64_t size_bytes = 0;
  uint64_t checksum = 0;
  ExtentList extents;
  MonoTime lease_deadline{0};     // latest deadline among its leases; 0 when it has none
  MonoTime soft_pin_deadline{0};  // 0 when not soft-pinned
  MonoTime expiry{0};             // its key in HostTier::expiry_ while in_expiry
  uint64_t seq = 0;               // its key in HostTier::by_seq_ while committed
  uint32_t num_tokens = 0;
  uint32_t leases = 0;  // unreleased lease handles, expired ones included
  uint32_t loads = 0;   // leases granted so far, for sampled verification
  ChunkState state = ChunkState::kReserved;
  // Bit fields: one byte for the three flags leaves room for `tenant` within 136 bytes.
  bool hard_pinned : 1 = false;
  bool unevictable : 1 = false;  // marked SetEvictable(false) in the policy
  bool in_expiry : 1 = false;
  uint16_t tenant = 0;  // its TenantTable label while in the index; 0: none recorded
};

// Every indexed chunk costs a record, an index slot, a commit-order slot and the policy's entry
// (BM_IndexBytesPerChunk measures the total). glibc serves 121..136-byte requests from the same
// 144-byte size class as 128-byte ones, so `seq` took the record to 136 bytes at no cost.
static_assert(sizeof(ChunkRecord) <= 136);

struct RecordHash {
  using is_transparent = void;
  size_t operator()(const ChunkKey& key) const { return absl::Hash<ChunkKey>{}(key); }
  size_t operator()(const ChunkRecord* record) const { return (*this)(record->key); }
};

struct RecordEq {
  using is_transparent = void;
  static const ChunkKey& KeyOf(const ChunkKey& key) { return key; }
  static const ChunkKey& KeyOf(const ChunkRecord* record) { return record->key; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return KeyOf(a) == KeyOf(b);
  }
};

// Names of the tenants that have chunks in the index, as small labels (1..kMaxTenants) so a
// record spends two bytes on its tenant. A label lives while a chunk carries it and is reused
// after its last chunk leaves. Guarded by the tier lock.
class TenantTable {
 public:
  static constexpr size_t kMaxTenants = UINT16_MAX;

  // The label of `name`, counting one more chunk under it; 0 when kMaxTenants other tenants
  // hold labels already.
  uint16_t Acquire(std::string_view name) {
    auto it = labels_.find(absl::string_view(name.data(), name.size()));
    if (it == labels_.end()) {
      if (free_.empty() && entries_.size() == kMaxTenants) return 0;
      uint16_t label = 0;
      if (free_.empty()) {
        entries_.push_back({});
        label = static_cast<uint16_t>(entries_.size());
      } else {
        label = free_.back();
        free_.pop_back();
      }
      entries_[label - 1].name = std::string(name);
      it = labels_.emplace(std::string(name), label).first;
    }
    ++entries_[it->second - 1].chunks;
    return it->second;
  }
  // One chunk under `label` left; the label is freed with its last chunk. 0: no-op.
  void Release(uint16_t label) {
    if (label == 0) return;
    Entry& entry = entries_[label - 1];
    STRATA_DCHECK(entry.chunks > 0);
    if (--entry.chunks > 0) return;
    labels_.erase(absl::string_view(entry.name.data(), entry.name.size()));
    entry.name.clear();
    free_.push_back(label);
  }
  // The label of `name`, 0 when no chunk carries it.
  uint16_t Find(std::string_view name) const {
    auto it = labels_.find(absl::string_view(name.data(), name.size()));
    return it == labels_.end() ? 0 : it->second;
  }

 private:
  struct Entry {
    std::string name;
    uint64_t chunks = 0;  // reserved and committed chunks carrying the label
  };
  absl::flat_hash_map<std::string, uint16_t> labels_;
  std::vector<Entry> entries_;  // by label - 1
  std::vector<uint16_t> free_;
};

struct alignas(64) IndexShard {
  mutable absl::Mutex mu;
  absl::flat_hash_set<ChunkRecord*, RecordHash, RecordEq> records ABSL_GUARDED_BY(mu);
};

}  // namespace internal_host

namespace {

using internal_host::ChunkRecord;
using internal_host::ChunkState;

// Every reader lock is an atomic write to the shard's mutex word, so concurrent Lookups of one
// chain bounce those cache lines between cores: fewer shards (a 128-key chain touches each of
// them once) scale better across reader threads, and 16 still leave a writer (one at a time,
// under mu_) blocking only a sixteenth of the probes.
constexpr size_t kNumShards = 16;

ChunkId IdOf(const ChunkRecord* record) { return reinterpret_cast<uintptr_t>(record); }
ChunkRecord* RecordOf(ChunkId id) { return reinterpret_cast<ChunkRecord*>(id); }

uint32_t PagesOf(const ChunkRecord& record) {
  uint32_t pages = 0;
  for (const Extent& extent : record.extents) pages += extent.num_pages;
  return pages;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Handles

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

ChunkLease::ChunkLease(ChunkLease&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)),
      clock_(other.clock_),
      handle_(other.handle_),
      key_(other.key_),
      size_bytes_(other.size_bytes_),
      checksum_(other.checksum_),
      num_tokens_(other.num_tokens_),
      owner_(other.owner_),
      deadline_(other.deadline_),
      base_(other.base_),
      ranges_(std::move(other.ranges_)) {}

ChunkLease& ChunkLease::operator=(ChunkLease&& other) noexcept {
  if (this != &other) {
    Release();
    tier_ = std::exchange(other.tier_, nullptr);
    clock_ = other.clock_;
    handle_ = other.handle_;
    key_ = other.key_;
    size_bytes_ = other.size_bytes_;
    checksum_ = other.checksum_;
    num_tokens_ = other.num_tokens_;
    owner_ = other.owner_;
    deadline_ = other.deadline_;
    base_ = other.base_;
    ranges_ = std::move(other.ranges_);
  }
  return *this;
}

ChunkLease::~ChunkLease() { Release(); }

void ChunkLease::Release() {
  if (HostTier* tier = std::exchange(tier_, nullptr)) tier->ReleaseLeaseHandle(handle_);
}

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
  STRATA_ASSIGN_OR_RETURN(
      std::unique_ptr<EvictionPolicy> policy,
      MakeEvictionPolicy(options.policy, {.capacity_bytes = options.capacity_bytes,
                                          .tenant_quotas = options.tenant_quotas}));
  absl::StatusOr<std::unique_ptr<SharedArena>> arena =
      SharedArena::Create({.size_bytes = options.capacity_bytes,
                           .use_hugepages = options.use_hugepages,
                           .prefault = options.prefault,
                           .name = options.arena_name});
  if (!arena.ok()) return Annotate(arena.status(), "host tier");
  return std::unique_ptr<HostTier>(new HostTier(options, *std::move(arena), std::move(policy)));
}

HostTier::HostTier(const HostTierOptions& options, std::unique_ptr<SharedArena> arena,
                   std::unique_ptr<EvictionPolicy> policy)
    : options_(options),
      clock_(options.clock),
      listener_(options.listener),
      observer_(options.observer),
      arena_(std::move(arena)),
      shards_(new Shard[kNumShards]),
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

size_t HostTier::ShardIndex(const ChunkKey& key) { return key.ShortHash() % kNumShards; }

HostTier::Shard& HostTier::ShardFor(const ChunkKey& key) const { return shards_[ShardIndex(key)]; }

HostTier::Record* HostTier::FindLocked(const ChunkKey& key) const {
  Shard& shard = ShardFor(key);
  absl::ReaderMutexLock lock(&shard.mu);
  auto it = shard.records.find(key);
  return it == shard.records.end() ? nullptr : *it;
}

uint32_t HostTier::PagesFor(uint64_t size_bytes) const {
  return static_cast<uint32_t>((size_bytes + options_.page_bytes - 1) / options_.page_bytes);
}

ArenaRangeList HostTier::RangesFor(const Record& record) const {
  ArenaRangeList ranges;
  uint64_t remaining = record.size_bytes;
  for (const Extent& extent : record.extents) {
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

void HostTier::MaybeDestroyLocked(Record* record) {
  if (record->state == ChunkState::kDropped && record->leases == 0 && record->extents.empty()) {
    delete record;
  }
}

void HostTier::ReleaseLeaseLocked(Record* record, MonoTime now) {
  STRATA_DCHECK(record->leases > 0);
  --active_leases_;
  if (--record->leases == 0) record->lease_deadline = MonoTime{0};
  switch (record->state) {
    case ChunkState::kCommitted:
      UpdateProtectionLocked(record, now);
      break;
    case ChunkState::kDropped:
      if (record->leases == 0) {
        FreePagesLocked(record);
        MaybeDestroyLocked(record);
      }
      break;
    case ChunkState::kEvicting:  // the evicting thread frees it
    case ChunkState::kReserved:
      break;
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
    uint64_t victim_pages = 0;
    while (victim_pages < shortfall) {
      const std::optional<ChunkId> id = policy_->PopVictim();
      if (!id.has_value()) break;
      Record* victim = RecordOf(*id);
      STRATA_DCHECK(!victim->unevictable && victim->state == ChunkState::kCommitted);
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
                             victim.checksum, victim.num_tokens);
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

// ---------------------------------------------------------------------------------------------
// Writes

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
  const uint64_t size_bytes = layout.chunk_bytes(options.num_tokens);
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
                          .tenant = options.tenant,
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
                     .tenant = handle.tenant});
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
// Reads

size_t HostTier::Lookup(std::span<const ChunkKey> chain) const {
  // Probe shard by shard: one reader lock per shard touched, and independent probes under it, so
  // the cache misses of different keys overlap (a lock per key would serialize them).
  size_t limit = 0;
  absl::InlinedVector<uint8_t, 256> shard_of(chain.size());
  std::array<uint32_t, kNumShards + 1> bucket_start{};
  while (limit < chain.size() && !chain[limit].empty()) {
    shard_of[limit] = static_cast<uint8_t>(ShardIndex(chain[limit]));
    ++bucket_start[shard_of[limit] + 1];
    ++limit;
  }
  for (size_t s = 0; s < kNumShards; ++s) bucket_start[s + 1] += bucket_start[s];
  absl::InlinedVector<uint32_t, 256> by_shard(limit);
  std::array<uint32_t, kNumShards> fill = {};
  for (size_t i = 0; i < limit; ++i) {
    by_shard[bucket_start[shard_of[i]] + fill[shard_of[i]]++] = static_cast<uint32_t>(i);
  }
  absl::InlinedVector<bool, 256> hit(limit, false);
  for (size_t s = 0; s < kNumShards; ++s) {
    if (bucket_start[s] == bucket_start[s + 1]) continue;
    const Shard& shard = shards_[s];
    absl::ReaderMutexLock lock(&shard.mu);
    // Every probe's first cache miss at once, before the first probe waits for its own.
    for (uint32_t j = bucket_start[s]; j < bucket_start[s + 1]; ++j) {
      shard.records.prefetch(chain[by_shard[j]]);
    }
    for (uint32_t j = bucket_start[s]; j < bucket_start[s + 1]; ++j) {
      auto it = shard.records.find(chain[by_shard[j]]);
      hit[by_shard[j]] = it != shard.records.end() && (*it)->state == ChunkState::kCommitted;
    }
  }
  size_t hits = 0;
  while (hits < limit && hit[hits]) ++hits;
  return hits;
}

bool HostTier::Contains(const ChunkKey& key) const {
  if (key.empty()) return false;
  const Shard& shard = ShardFor(key);
  absl::ReaderMutexLock lock(&shard.mu);
  auto it = shard.records.find(key);
  return it != shard.records.end() && (*it)->state == ChunkState::kCommitted;
}

HostTier::AcquireRun HostTier::AcquireChain(std::span<const ChunkKey> chain,
                                            std::chrono::nanoseconds duration, uint64_t owner,
                                            LeaseUse use) {
  const bool is_load = use != LeaseUse::kTierCopy;
  AcquireRun run;
  std::vector<bool> verify;
  const MonoTime now = clock_->Now();
  const MonoTime deadline = now + duration;
  {
    absl::MutexLock lock(&mu_);
    for (const ChunkKey& key : chain) {
      Record* record = FindLocked(key);
      if (record == nullptr || record->state != ChunkState::kCommitted) {
        if (is_load) ++misses_;
        break;
      }
      if (is_load) {
        ++hits_;
        hit_bytes_ += record->size_bytes;
        policy_->OnAccess(IdOf(record));
      }
      const uint64_t handle = next_handle_++;
      handles_.emplace(handle, Handle{.record = record, .owner = owner, .is_lease = true});
      ++bound_handles_;
      ++active_leases_;
      ++record->leases;
      record->lease_deadline = std::max(record->lease_deadline, deadline);
      UpdateProtectionLocked(record, now);
      const bool due = is_load && record->loads++ % options_.verify_every_n_loads == 0;
      verify.push_back(use == LeaseUse::kLoad && due);

      ChunkLease lease;
      lease.tier_ = this;
      lease.clock_ = clock_;
      lease.handle_ = handle;
      lease.key_ = record->key;
      lease.size_bytes_ = record->size_bytes;
      lease.checksum_ = record->checksum;
      lease.num_tokens_ = record->num_tokens;
      lease.owner_ = owner;
      lease.deadline_ = deadline;
      lease.base_ = arena_->base();
      lease.ranges_ = RangesFor(*record);
      run.leases.push_back(std::move(lease));
    }
  }
  for (size_t i = 0; i < run.leases.size(); ++i) {
    if (!verify[i]) continue;
    const uint64_t computed = run.leases[i].payload().Checksum();
    if (computed == run.leases[i].checksum()) continue;
    run.failure = OnChecksumMismatch(run.leases[i], computed);
    // The rest of the chain is useless without this chunk.
    run.leases.erase(run.leases.begin() + static_cast<ptrdiff_t>(i), run.leases.end());
    break;
  }
  return run;
}

absl::Status HostTier::OnChecksumMismatch(ChunkLease& lease, uint64_t computed) {
  lease.tier_ = nullptr;
  absl::MutexLock lock(&mu_);
  --bound_handles_;
  auto it = handles_.find(lease.handle_);
  if (it == handles_.end()) {
    return absl::AbortedError(
        fmt::format("host tier: lease on chunk {} was released while its checksum was verified",
                    lease.key().ToString()));
  }
  Record* record = it->second.record;
  handles_.erase(it);
  const MonoTime now = clock_->Now();
  if (now >= lease.deadline()) {
    // The pages may have been reused under the verification: the mismatch proves nothing.
    ReleaseLeaseLocked(record, now);
    return absl::AbortedError(fmt::format(
        "host tier: lease on chunk {} expired before its checksum was verified; retry with a "
        "longer lease",
        lease.key().ToString()));
  }
  --hits_;
  hit_bytes_ -= record->size_bytes;
  ++misses_;
  if (record->state == ChunkState::kCommitted) {
    ++checksum_failures_;
    DropLocked(record, now, RemovalCause::kCorrupt, /*notify=*/true);
  }
  ReleaseLeaseLocked(record, now);
  return absl::DataLossError(
      fmt::format("host tier: checksum mismatch in chunk {} ({} bytes): committed {:016x}, read "
                  "{:016x}; the chunk was dropped",
                  lease.key().ToString(), lease.size_bytes(), lease.checksum(), computed));
}

absl::StatusOr<std::optional<ChunkLease>> HostTier::Acquire(
    const ChunkKey& key, std::optional<std::chrono::nanoseconds> lease_duration, uint64_t owner,
    bool reader_verifies) {
  return AcquireOne(key, lease_duration, owner,
                    reader_verifies ? LeaseUse::kLoadUnverified : LeaseUse::kLoad);
}

absl::StatusOr<std::optional<ChunkLease>> HostTier::AcquireForCopy(
    const ChunkKey& key, std::optional<std::chrono::nanoseconds> lease_duration) {
  return AcquireOne(key, lease_duration, /*owner=*/0, LeaseUse::kTierCopy);
}

absl::StatusOr<std::optional<ChunkLease>> HostTier::AcquireOne(
    const ChunkKey& key, std::optional<std::chrono::nanoseconds> lease_duration, uint64_t owner,
    LeaseUse use) {
  if (key.empty()) return absl::InvalidArgumentError("host tier: acquire: empty chunk key");
  const std::chrono::nanoseconds duration = lease_duration.value_or(options_.default_lease);
  if (duration.count() <= 0) {
    return absl::InvalidArgumentError("host tier: acquire: lease duration must be positive");
  }
  AcquireRun run = AcquireChain({&key, 1}, duration, owner, use);
  if (!run.failure.ok()) return run.failure;
  if (run.leases.empty()) return std::optional<ChunkLease>();
  return std::optional<ChunkLease>(std::move(run.leases.front()));
}

absl::StatusOr<PrefixLeases> HostTier::AcquirePrefix(
    std::span<const ChunkKey> chain, std::optional<std::chrono::nanoseconds> lease_duration,
    uint64_t owner) {
  for (const ChunkKey& key : chain) {
    if (key.empty()) {
      return absl::InvalidArgumentError("host tier: acquire prefix: empty chunk key in the chain");
    }
  }
  const std::chrono::nanoseconds duration = lease_duration.value_or(options_.default_lease);
  if (duration.count() <= 0) {
    return absl::InvalidArgumentError("host tier: acquire prefix: lease duration must be positive");
  }
  AcquireRun run = AcquireChain(chain, duration, owner);
  return PrefixLeases{
      .leases = std::move(run.leases),
      .data_loss_chunks = run.failure.code() == absl::StatusCode::kDataLoss ? 1u : 0u};
}

void HostTier::ReleaseLeaseHandle(uint64_t handle_id) {
  absl::MutexLock lock(&mu_);
  --bound_handles_;
  auto it = handles_.find(handle_id);
  if (it == handles_.end()) return;
  Record* record = it->second.record;
  handles_.erase(it);
  ReleaseLeaseLocked(record, clock_->Now());
}

size_t HostTier::ReleaseOwner(uint64_t owner) {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> ids;
  for (const auto& [id, handle] : handles_) {
    if (handle.is_lease && handle.owner == owner) ids.push_back(id);
  }
  const MonoTime now = clock_->Now();
  for (uint64_t id : ids) {
    auto it = handles_.find(id);
    Record* record = it->second.record;
    handles_.erase(it);
    ReleaseLeaseLocked(record, now);
  }
  return ids.size();
}

// ---------------------------------------------------------------------------------------------
// Pins and removal

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

absl::StatusOr<RemoveResult> HostTier::Remove(const ChunkKey& key) {
  if (key.empty()) return absl::InvalidArgumentError("host tier: remove: empty chunk key");
  absl::MutexLock lock(&mu_);
  Record* record = FindLocked(key);
  if (record == nullptr || record->state != ChunkState::kCommitted) return RemoveResult{};
  const RemoveResult result{.chunks = 1, .bytes = record->size_bytes};
  ++removed_;
  removed_bytes_ += record->size_bytes;
  DropLocked(record, clock_->Now(), RemovalCause::kRemoved, /*notify=*/true);
  return result;
}

RemoveResult HostTier::RemoveIf(absl::FunctionRef<bool(const ChunkKey&)> predicate) {
  RemoveResult result;
  for (size_t i = 0; i < kNumShards; ++i) {
    absl::MutexLock lock(&mu_);
    const MonoTime now = clock_->Now();
    std::vector<Record*> matches;
    {
      absl::ReaderMutexLock shard_lock(&shards_[i].mu);
      for (Record* record : shards_[i].records) {
        if (record->state == ChunkState::kCommitted && predicate(record->key)) {
          matches.push_back(record);
        }
      }
    }
    for (Record* record : matches) {
      ++result.chunks;
      result.bytes += record->size_bytes;
      ++removed_;
      removed_bytes_ += record->size_bytes;
      DropLocked(record, now, RemovalCause::kRemoved, /*notify=*/true);
    }
  }
  return result;
}

RemoveResult HostTier::RemoveAll() {
  RemoveResult result;
  absl::MutexLock lock(&mu_);
  const MonoTime now = clock_->Now();
  std::vector<Record*> committed;
  committed.reserve(chunks_);
  for (size_t i = 0; i < kNumShards; ++i) {
    absl::ReaderMutexLock shard_lock(&shards_[i].mu);
    for (Record* record : shards_[i].records) {
      if (record->state == ChunkState::kCommitted) committed.push_back(record);
    }
  }
  for (Record* record : committed) {
    ++result.chunks;
    result.bytes += record->size_bytes;
    ++removed_;
    removed_bytes_ += record->size_bytes;
    DropLocked(record, now, RemovalCause::kRemoved, /*notify=*/false);
  }
  if (observer_ != nullptr) observer_->OnCleared();
  return result;
}

// ---------------------------------------------------------------------------------------------
// Introspection

void HostTier::StopAdmitting() {
  absl::MutexLock lock(&mu_);
  admitting_ = false;
}

bool HostTier::admitting() const {
  absl::MutexLock lock(&mu_);
  return admitting_;
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
  };
  for (const Record* record : detached_) stats.pending_free_bytes += record->size_bytes;
  for (const auto& [expiry, record] : expiry_) {
    if (record->soft_pin_deadline > now) stats.soft_pinned_bytes += record->size_bytes;
    if (record->leases > 0 && record->lease_deadline > now)
      stats.leased_bytes += record->size_bytes;
  }
  return stats;
}

absl::Status HostTier::CheckConsistency() const {
  absl::MutexLock lock(&mu_);
  auto fail = [](std::string message) {
    return absl::InternalError("host tier consistency: " + message);
  };
  std::vector<Extent> extents = allocator_.FreeRunsForTesting();
  uint64_t chunks = 0, payload = 0, committed_pages = 0, unevictable_pages = 0, hard_pinned = 0;
  uint64_t reservations = 0, reserved = 0;
  absl::flat_hash_map<const Record*, uint32_t> leases;
  for (const auto& [id, handle] : handles_) {
    if (handle.is_lease) ++leases[handle.record];
  }
  auto check_record = [&](const Record* record) -> absl::Status {
    const uint32_t pages = PagesOf(*record);
    if (!record->extents.empty() && pages != PagesFor(record->size_bytes)) {
      return fail(fmt::format("chunk {} holds {} pages for {} bytes", record->key.ToString(), pages,
                              record->size_bytes));
    }
    const auto it = leases.find(record);
    const uint32_t handle_leases = it == leases.end() ? 0 : it->second;
    if (handle_leases != record->leases) {
      return fail(fmt::format("chunk {} has {} lease handles but counts {}", record->key.ToString(),
                              handle_leases, record->leases));
    }
    extents.insert(extents.end(), record->extents.begin(), record->extents.end());
    return absl::OkStatus();
  };
  for (size_t i = 0; i < kNumShards; ++i) {
    absl::ReaderMutexLock shard_lock(&shards_[i].mu);
    for (const Record* record : shards_[i].records) {
      if (&ShardFor(record->key) != &shards_[i]) return fail("chunk in the wrong shard");
      if (record->state == ChunkState::kCommitted) {
        ++chunks;
        payload += record->size_bytes;
        committed_pages += PagesOf(*record);
        if (record->unevictable) unevictable_pages += PagesOf(*record);
        if (record->hard_pinned) hard_pinned += record->size_bytes;
      } else if (record->state == ChunkState::kReserved) {
        if (!record->extents.empty()) {
          ++reservations;
          reserved += record->size_bytes;
        }
      } else {
        return fail(fmt::format("dropped chunk {} still indexed", record->key.ToString()));
      }
      STRATA_RETURN_IF_ERROR(check_record(record));
    }
  }
  for (const Record* record : detached_) {
    if (record->state == ChunkState::kCommitted || record->state == ChunkState::kReserved) {
      return fail("indexed chunk in the detached set");
    }
    STRATA_RETURN_IF_ERROR(check_record(record));
  }
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.first_page < b.first_page; });
  uint64_t next_page = 0;
  for (const Extent& extent : extents) {
    if (extent.first_page != next_page) {
      return fail(fmt::format("page {} is {}", std::min<uint64_t>(extent.first_page, next_page),
                              extent.first_page > next_page ? "lost (neither free nor held)"
                                                            : "both free and held, or held twice"));
    }
    next_page = extent.end_page();
  }
  if (next_page != allocator_.num_pages()) {
    return fail(fmt::format("pages {}..{} are lost", next_page, allocator_.num_pages()));
  }
  if (chunks != chunks_ || payload != payload_bytes_ || committed_pages != committed_pages_ ||
      unevictable_pages != unevictable_pages_ || hard_pinned != hard_pinned_bytes_) {
    return fail(fmt::format(
        "committed chunks: counted {} chunks / {} bytes / {} pages / {} unevictable pages / {} "
        "hard-pinned bytes, tracked {} / {} / {} / {} / {}",
        chunks, payload, committed_pages, unevictable_pages, hard_pinned, chunks_, payload_bytes_,
        committed_pages_, unevictable_pages_, hard_pinned_bytes_));
  }
  if (reservations != reservations_ || reserved != reserved_bytes_) {
    return fail(fmt::format("reservations: counted {} / {} bytes, tracked {} / {}", reservations,
                            reserved, reservations_, reserved_bytes_));
  }
  if (by_seq_.size() != chunks_) {
    return fail(fmt::format("{} chunks in commit order, {} committed", by_seq_.size(), chunks_));
  }
  if (policy_->size() != chunks_) {
    return fail(fmt::format("policy tracks {} chunks, index holds {}", policy_->size(), chunks_));
  }
  uint64_t lease_handles = 0;
  for (const auto& [record, count] : leases) lease_handles += count;
  if (lease_handles != active_leases_) {
    return fail(fmt::format("{} lease handles, {} counted", lease_handles, active_leases_));
  }
  if (handles_.size() - lease_handles != reservations_) {
    return fail(fmt::format("{} reservation handles, {} counted", handles_.size() - lease_handles,
                            reservations_));
  }
  return absl::OkStatus();
}

}  // namespace strata::storage
