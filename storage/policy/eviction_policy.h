// EvictionPolicy decides which chunk a tier gives up next when it needs space. Tiers own one
// policy each and call it under their own lock: implementations are not thread-safe and must
// not call back into the tier. Every operation is O(1) amortized.
//
// Identity: `id` is the tier's handle of a resident chunk (unique while resident, may be reused
// after removal); `key_hash` is stable across removal and re-insertion of the same ChunkKey
// (ChunkKey::ShortHash), for policies that remember chunks they no longer hold (ghost lists).
//
// Lifecycle of a chunk in a policy:
//   OnInsert (committed; evictable) -> OnAccess* / SetEvictable* -> OnRemove or PopVictim.
// A chunk that is leased, pinned or otherwise protected is marked SetEvictable(id, false) by
// the tier and must never be returned by PopVictim until it is marked evictable again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::storage {

using ChunkId = uint64_t;
inline constexpr ChunkId kNoChunk = 0;

struct PolicyChunkInfo {
  ChunkId id = kNoChunk;
  uint64_t key_hash = 0;
  uint64_t size_bytes = 0;
  // The previous chunk of its prefix chain when that chunk is resident in the same tier.
  ChunkId parent = kNoChunk;
  // The last, partial chunk of a prompt: rarely read again, because its key changes as soon as
  // the conversation grows.
  bool partial = false;
  // Brought back from a lower tier because a reader asked for it (a promotion): a second
  // reference, so policies that admit chunks on probation place it as if it had been read.
  bool reused = false;
  uint32_t tenant = 0;
};

// A bound on the bytes one tenant keeps in a tier (PolicyChunkInfo::tenant).
struct TenantQuota {
  uint32_t tenant = 0;
  uint64_t bytes = 0;
};

struct PolicyOptions {
  // Capacity of the tier the policy serves; the adaptive policies size their queues and ghost
  // lists from it and need it non-zero.
  uint64_t capacity_bytes = 0;
  // When not empty, the policy is partitioned per tenant (TenantQuotaPolicy); tenants not
  // listed are bounded only by the capacity.
  std::vector<TenantQuota> tenant_quotas;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  virtual std::string_view name() const = 0;

  // A chunk was committed to the tier; it starts evictable. `info.id` must not be tracked.
  virtual void OnInsert(const PolicyChunkInfo& info) = 0;
  // A resident chunk was read (a hit).
  virtual void OnAccess(ChunkId id) = 0;
  // A resident chunk left the tier for a reason other than PopVictim (removed, cleared,
  // dropped as corrupt). Unknown ids are ignored.
  virtual void OnRemove(ChunkId id) = 0;
  // Protects (false) or releases (true) a resident chunk from eviction.
  virtual void SetEvictable(ChunkId id, bool evictable) = 0;
  // Chooses the next victim among evictable chunks and stops tracking it; the tier must evict
  // it. nullopt when no chunk is evictable.
  virtual std::optional<ChunkId> PopVictim() = 0;
  // Number of tracked (resident) chunks, evictable or not.
  virtual size_t size() const = 0;
};

// The policies MakeEvictionPolicy knows, the default first.
inline constexpr std::string_view kDefaultEvictionPolicy = "adaptive";
std::vector<std::string_view> EvictionPolicyNames();

// Builds a policy by name: "adaptive" (the default), "lru", "arc", "s3fifo", "prefix-lru".
// kInvalidArgument for an unknown name, for a capacity of 0 with a policy that needs it, and
// for a tenant listed twice or with a zero quota.
absl::StatusOr<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                                   const PolicyOptions& options);

}  // namespace strata::storage
