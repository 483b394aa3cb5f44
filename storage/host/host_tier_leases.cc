// Reading chunks: ChunkLease, and HostTier's Lookup, Contains, the Acquire calls and the release
// of leases.
#include "storage/host/host_tier.h"

#include <algorithm>
#include <array>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "core/check.h"
#include "fmt/format.h"
#include "storage/host/internal/chunk_record.h"
#include "storage/host/internal/host_tier_inline.h"

namespace strata::storage {
namespace {

using internal_host::ChunkState;
using internal_host::IdOf;
using internal_host::kNumShards;

}  // namespace

// ---------------------------------------------------------------------------------------------
// ChunkLease

ChunkLease::ChunkLease(ChunkLease&& other) noexcept
    : tier_(std::exchange(other.tier_, nullptr)),
      clock_(other.clock_),
      handle_(other.handle_),
      key_(other.key_),
      size_bytes_(other.size_bytes_),
      checksum_(other.checksum_),
      encoding_(other.encoding_),
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
    encoding_ = other.encoding_;
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
// Lookups

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

// ---------------------------------------------------------------------------------------------
// Leases

HostTier::AcquireRun HostTier::AcquireChain(std::span<const ChunkKey> chain,
                                            std::chrono::nanoseconds duration, uint64_t owner,
                                            LeaseUse use, Forms forms) {
  // A decoder's lease (kAny) is no load: the load counts once the chunk is plain.
  const bool is_load = use != LeaseUse::kTierCopy && forms.CountsLoads();
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
      const StoredEncoding form = record->encoded ? FormOfLocked(record) : StoredEncoding{};
      if (form.encoded() && !forms.Leases(form.codec)) break;
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
      lease.encoding_ = form;
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
    bool reader_verifies, Forms forms) {
  return AcquireOne(key, lease_duration, owner,
                    reader_verifies ? LeaseUse::kLoadUnverified : LeaseUse::kLoad, forms);
}

absl::StatusOr<std::optional<ChunkLease>> HostTier::AcquireForCopy(
    const ChunkKey& key, std::optional<std::chrono::nanoseconds> lease_duration, Forms forms) {
  return AcquireOne(key, lease_duration, /*owner=*/0, LeaseUse::kTierCopy, forms);
}

absl::StatusOr<std::optional<ChunkLease>> HostTier::AcquireOne(
    const ChunkKey& key, std::optional<std::chrono::nanoseconds> lease_duration, uint64_t owner,
    LeaseUse use, Forms forms) {
  if (key.empty()) return absl::InvalidArgumentError("host tier: acquire: empty chunk key");
  const std::chrono::nanoseconds duration = lease_duration.value_or(options_.default_lease);
  if (duration.count() <= 0) {
    return absl::InvalidArgumentError("host tier: acquire: lease duration must be positive");
  }
  AcquireRun run = AcquireChain({&key, 1}, duration, owner, use, forms);
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

}  // namespace strata::storage
