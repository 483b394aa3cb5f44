// The host tier's index: one ChunkRecord per chunk, the shards that map keys to records, and the
// helpers on records that the host_tier*.cc files share. Internal to storage/host; every field is
// guarded as ChunkRecord's comment says.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "core/clock.h"
#include "storage/host/page_allocator.h"
#include "storage/policy/eviction_policy.h"

namespace strata::storage::internal_host {

enum class ChunkState : uint8_t {
  kReserved,   // in the index, invisible to lookups; pages written by its reservation's holder
  kCommitted,  // in the index and the policy; visible
  kEvicting,   // out of the index; pages held while the eviction listener reads them
  kDropped,    // out of the index; pages (if any) held until no unexpired lease reads them
};

// One chunk. Its address is its policy ChunkId. Fields are guarded by the tier lock, except
// `state` and `encoded`, which are written under the tier lock and the shard lock together (so a
// Lookup may read them under the shard lock alone), and the key. Sizes, checksum and extents are
// set at commit and change only under the tier lock, by ReplaceForm, while its caller holds the
// chunk's only lease: a reader reads them through its lease, a detached chunk's never change.
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
  // Bit fields, two bytes in all, which leaves room for `tenant` within 136 bytes. `state` and
  // `encoded` are one memory location (the shard lock's); the zero-width field ends it, so the
  // other flags (the tier lock's alone) are another.
  ChunkState state : 7 = ChunkState::kReserved;
  bool encoded : 1 = false;  // stored as a codec's frame: its form is in HostTier::encodings_
  uint8_t : 0;
  bool hard_pinned : 1 = false;
  bool unevictable : 1 = false;  // marked SetEvictable(false) in the policy
  bool in_expiry : 1 = false;
  uint16_t tenant = 0;  // its TenantTable label while in the index; 0: none recorded
};

// Every indexed chunk costs a record, an index slot, a commit-order slot and the policy's entry
// (BM_IndexBytesPerChunk measures the total). glibc serves 121..136-byte requests from the same
// 144-byte size class as 128-byte ones, so `seq` took the record to 136 bytes at no cost.
static_assert(sizeof(ChunkRecord) <= 136);

inline ChunkId IdOf(const ChunkRecord* record) { return reinterpret_cast<uintptr_t>(record); }
inline ChunkRecord* RecordOf(ChunkId id) { return reinterpret_cast<ChunkRecord*>(id); }

inline uint32_t PagesOf(const ChunkRecord& record) {
  uint32_t pages = 0;
  for (const Extent& extent : record.extents) pages += extent.num_pages;
  return pages;
}

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

// Every reader lock is an atomic write to the shard's mutex word, so concurrent Lookups of one
// chain bounce those cache lines between cores: fewer shards (a 128-key chain touches each of
// them once) scale better across reader threads, and 16 still leave a writer (one at a time,
// under mu_) blocking only a sixteenth of the probes.
inline constexpr size_t kNumShards = 16;

struct alignas(64) IndexShard {
  mutable absl::Mutex mu;
  absl::flat_hash_set<ChunkRecord*, RecordHash, RecordEq> records ABSL_GUARDED_BY(mu);
};

}  // namespace strata::storage::internal_host
