// ClusterIndex: the cluster's chunk index, which registered instance holds which chunk in which
// tiers, built from the KV events of every instance's daemon (chunk_event.h) and asked, for a
// prefix chain of keys, how long a prefix each instance holds (the router's question, DESIGN.md
// sections 1 and 7). The controller holds one.
//
// Layout: a hash table from a 64-bit index key of each chunk (IndexKey) to the chunk's holders
// (holder_list.h: instance slot, generation tag, tier bits; 4 bytes each), split into
// `shard_count` ChunkTables (chunk_table.h) by the key's top bits. An entry is 16 bytes, the key
// and a holder word that holds up to two holders inline (more live in blocks of a HolderStore,
// holder_store.h), in an open-addressing table at most 3/4 full: a chunk held by one or two
// instances costs 16 bytes / load, and a lookup one cache miss per chunk, prefetched ahead. Each
// shard grows (rehashes) on its own, and the sweep works through them one by one. Tables and
// holder blocks live in TableMemory (table_memory.h): huge pages, address ranges kept mapped.
//
// Keys and collisions: the index stores no ChunkKey, only IndexKey(key) = key.ShortHash(), 64
// bits of the uniformly distributed digest mixed with the layout fingerprint (0 becomes 1). Two
// distinct keys with the same index key are one entry here: a lookup may then report a chunk as
// held by an instance that holds only the other key, and a removal of one may hide the other. With
// n distinct chunks in the cluster the chance that any pair collides is about n^2 / 2^65 (4e-5 at
// 40M chunks). The consequence is only a worse route: the router sends the request to an
// instance that then misses (part of) the prefix, and the daemon, which verifies full keys in its
// own index, computes that KV again. A collision never makes any instance serve wrong KV.
//
// Dropping and clearing are O(1), through generations (instance_table.h): each instance slot has
// a generation and each holder the generation it was stored under; DropInstance and a kCleared
// event move the slot to a new generation, after which every lookup ignores the old holders,
// as if they were gone. The stale holders are reclaimed lazily: when an event next writes their
// chunk, and by Sweep, which the owner calls periodically with a budget (e.g. from a timer, a few
// thousand chunks per call), each call cleaning whole shards, resuming where the last one
// stopped. A dropped instance's entries are thus reclaimed within one sweep pass (and a shard's
// table shrinks once it is under a quarter full).
//
// Thread-safety: every method is thread-safe. Writers (Ingest, RegisterInstance, DropInstance,
// Sweep, stats) take the writer lock, once per call: ingest events in batches (one instance's
// events per call) to amortize it. LookupChain takes no lock on its walk: each shard is a seqlock
// (chunk_table.h) that the writer holds for one event at a time, and a lookup reads each chunk's
// holders again when a change of its shard overlapped the read; it takes the instance-id lock
// (shared) once at the end, to name the instances it found. A lookup thus never waits behind a
// batch, a shard's growth or a sweep; it sees each chunk as it was before or after each event
// (a batch applied while it walks may be half visible to it), and no instance dropped or cleared
// before the lookup started. Lock order: writer lock, then instance-id lock.
//
// Cost, measured by bench/micro/controller_bench on the 2-core development VM at 100 instances x
// 1M chunks, 3 runs per figure (noisy, shared VM), one and two holders per chunk: 21.5 and 10.7
// bytes per (chunk, instance) pair (VmRSS); ingest 7.1-9.1 and 7.5-10.8M events/s while building
// (shards growing), 5.7-6.0 and 12.2-12.5M events/s at a constant size (store and remove); a
// 128-chunk lookup p50 5.7-7.1 and 4.9-5.4 us, p99 15-16 and 10-11 us alone, about the same with
// ingest running on the other core. The floor measured in the same runs, 128 random cache-line
// reads over memory of the table's size, is p50 2.6-3.2 us and p99 5.8-7.2 us: lookups run at
// 1.7-2.7x it. A chunk held by more than two instances costs a second cache miss (its block).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "controller/index/chunk_event.h"
#include "controller/index/chunk_table.h"
#include "controller/index/holder_list.h"
#include "controller/index/holder_store.h"
#include "controller/index/instance_table.h"
#include "controller/index/table_memory.h"
#include "core/chunk_key.h"

namespace strata::controller {

struct ClusterIndexOptions {
  // Instances registered at once; at most 65536 (InstanceTable::kMaxInstances).
  uint32_t max_instances = 4096;
  // Hash table shards, a power of two in [1, 65536]. A shard is what grows at once (a rehash
  // the writer does aside, then publishes), what one Sweep step cleans, and an allocation that
  // huge pages back once it reaches 2 MiB: with 100M (chunk, instance) pairs, 256 shards hold
  // about 200K chunks (2 instances a chunk) to 400K (1 a chunk), 4 to 8 MiB, each.
  uint32_t shard_count = 256;
};

// One instance's answer to a chain lookup.
struct InstanceChainHit {
  std::string instance_id;
  // The instance holds keys[0 .. prefix_chunks) of the chain (and, as far as the index knows,
  // not keys[prefix_chunks]).
  uint32_t prefix_chunks = 0;
  // Those prefix_chunks chunks by the fastest tier the instance holds each in: the router turns
  // them into bytes per tier (chunk bytes x count) for its score.
  std::array<uint32_t, kTierCount> chunks_per_tier{};
};

struct ClusterIndexStats {
  uint64_t instances = 0;      // registered
  uint64_t live_entries = 0;   // (chunk, instance) pairs lookups see
  uint64_t stale_entries = 0;  // pairs of dropped or cleared generations, not yet reclaimed
  uint64_t chunks = 0;         // index keys in the table (with live or stale holders)
  uint64_t memory_bytes = 0;   // estimate: table slots and control bytes, holder lists, instances
};

struct SweepResult {
  uint64_t visited_chunks = 0;
  uint64_t reclaimed_entries = 0;  // stale holders removed
  bool pass_completed = false;     // this call visited the last shard of a pass
};

class ClusterIndex {
 public:
  // kInvalidArgument for options out of range.
  static absl::StatusOr<std::unique_ptr<ClusterIndex>> Create(const ClusterIndexOptions& options);

  // The key the index stores for `key` (see the header comment on collisions).
  static uint64_t IndexKey(const ChunkKey& key) {
    const uint64_t hash = key.ShortHash();
    return hash != 0 ? hash : 1;  // 0 marks an empty ChunkTable entry
  }

  // Registers an instance with no chunks. kInvalidArgument for an empty id, kFailedPrecondition
  // when it is registered already, kResourceExhausted when max_instances are registered. An id
  // registered again after DropInstance starts empty: its earlier chunks do not come back.
  absl::Status RegisterInstance(std::string_view instance_id);

  // Unregisters an instance; its chunks vanish from every lookup before this returns. O(1) (the
  // entries are reclaimed lazily), except when the instance's slot went through 4095 drops and
  // clears since the last completed sweep pass: then a full sweep runs first.
  // kFailedPrecondition when the id is not registered.
  absl::Status DropInstance(std::string_view instance_id);

  // Applies `events` of one registered instance in order. All or nothing: kFailedPrecondition
  // when the instance is not registered, kInvalidArgument (naming the event) for an event with
  // an empty key or a tier or kind out of range; nothing is applied then. Removing a chunk or
  // tier the index does not have is not an error (events may cross a clear). kCleared is O(1),
  // like DropInstance, and leaves the instance registered.
  absl::Status Ingest(std::string_view instance_id, std::span<const ChunkEvent> events);

  // For the prefix chain `keys` (chunk i valid only after chunks 0 .. i-1), each registered
  // instance that holds keys[0], with the length of the prefix it holds and that prefix's chunks
  // by tier; longest prefix first (ties by instance id). Walks the chain once, intersecting the
  // holder sets, and stops at the first chunk no remaining instance holds. Empty `keys`, or an
  // empty key first: no hits.
  std::vector<InstanceChainHit> LookupChain(std::span<const ChunkKey> keys) const;

  // Reclaims stale holders: visits whole shards, from where the previous call stopped, until at
  // least `max_chunks` chunks were visited (so at most one shard more) or one full pass was made.
  // Chunks left with no holder are erased; a shard left under a quarter full is shrunk.
  SweepResult Sweep(uint64_t max_chunks);

  ClusterIndexStats stats() const;

 private:
  using Shard = internal_index::ChunkTable;

  explicit ClusterIndex(const ClusterIndexOptions& options);

  // The top log2(shard_count) bits; shifted in two steps so that one shard (a shift by 64) is
  // defined.
  size_t ShardIndex(uint64_t index_key) const { return (index_key >> 1) >> (shard_shift_ - 1); }

  void StoreLocked(uint16_t slot, uint64_t index_key, Tier tier) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(uint16_t slot, uint64_t index_key, Tier tier)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drop (drop true) or clear the instance in `slot`.
  void RetireGenerationLocked(uint16_t slot, bool drop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes `list`'s stale holders (counted out of holder_entries_).
  void PurgeStaleLocked(internal_index::HolderList& list) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sweeps the shard at sweep_cursor_ and advances the cursor, completing a pass at the last shard.
  SweepResult SweepStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes the current pass and one full pass after it.
  void SweepAllLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t shard_shift_;  // 64 - log2(shard_count)

  // The writer lock. Lookups read the shards, the holder store and the live tags without it.
  mutable absl::Mutex mu_;
  // Guards the instances' ids (InstanceTable::instance_id and its id map), which RegisterInstance
  // and DropInstance change holding both locks and lookups read holding this one.
  mutable absl::Mutex ids_mu_ ABSL_ACQUIRED_AFTER(mu_);
  // Declared before the tables and the store that take their memory from it.
  internal_index::TableMemory memory_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<Shard[]> shards_;
  const size_t shard_count_;
  internal_index::HolderStore holders_;
  internal_index::InstanceTable instances_;
  uint32_t sweep_cursor_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t live_entries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t holder_entries_ ABSL_GUARDED_BY(mu_) = 0;  // live and stale
};

}  // namespace strata::controller
