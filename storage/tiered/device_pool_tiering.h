// DevicePoolTiering moves position-independent chunks between the device pools (T0,
// storage/device/device_pool.h) and the host tier (T1), so T0 demotes like every other tier
// (T0 -> T1 -> T2: the host tier demotes what it evicts in turn) and a chunk evicted from T0 comes
// back without being recomputed:
//   - Demote (a pool's on_evict, DevicePoolsOptions::on_evict): the evicted chunk's pages are
//     copied into a host-tier chunk under the same key, in its layout's chunk format
//     ([layer][plane][token]..., PoolChunkRuns) of pages * block_tokens tokens;
//   - Promote (a pool acquire that missed): a host-tier chunk of that key, of a whole number of
//     pages, is given pages in the pool (admission first) and copied there, checksummed, then
//     committed. A runtime with digested copies checksums the bytes as it copies them (one pass
//     over the payload); another checksums them before the reservation (two passes). A host
//     chunk a token-dropping codec thinned (Compress) is promoted as its kept blocks: its frame
//     is checked and decoded (TokenDropCodec::DecodeKept) on the calling thread, and each kept
//     block takes its pages with their positions in the chunk (DevicePool::Reserve's
//     `positions`). The pool never demotes such a chunk: its frame stays in the host tier.
//   - DemoteAhead (a pool's on_evictable, with demote_ahead): a chunk that becomes evictable is
//     queued, and a thread of this object's copies it into the host tier while it holds a
//     reference to it (so its pages stay), off the pool's lock. Its eviction then finds the
//     host tier holding it and copies nothing under the lock. A chunk queued past the queue's
//     bound, or evicted before the thread reached it, is copied at its eviction as above.
// Copies go through one stream of the daemon's DeviceRuntime (device <-> the arena), then wait for
// it: the calling thread waits for the copy (the pool's lock is held during a demotion at
// eviction, not during one ahead of it).
//
// All are best effort: the chunk is a cache entry, so a failure (the host tier full or holding
// the key already, a copy that fails, a checksum that does not match) is counted and the chunk
// is dropped or recomputed, never served wrong.
//
// Thread-safety: thread-safe (the stream is used under a mutex that is never held while calling
// into a pool, so a promotion's reservation may evict, and demote, without deadlock).
// Ownership: borrows the host tier and the runtime, which must outlive it. Lifecycle: the pools
// it is told of must outlive its demotions ahead: Stop (or destroy) it before them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/device/device_pool.h"
#include "storage/device/device_runtime.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/background_worker.h"

namespace strata::storage {

struct DevicePoolTieringStats {
  uint64_t demoted = 0;  // chunks copied into the host tier
  uint64_t demoted_bytes = 0;
  uint64_t demote_skipped = 0;   // the host tier held or was writing the key already
  uint64_t demote_failures = 0;  // the host tier refused it, or the copy failed
  uint64_t promoted = 0;         // chunks copied into a pool
  uint64_t promoted_bytes = 0;
  uint64_t promote_failures = 0;  // a checksum mismatch, or the copy failed
  // Of `promoted`: thinned chunks, promoted as their kept blocks.
  uint64_t promoted_kept = 0;
  // Of `demoted`: copied ahead of their eviction, by the thread, off the pool's lock.
  uint64_t demoted_ahead = 0;
  // Not queued for a demotion ahead (the queue full, or stopped): copied at eviction if need be.
  uint64_t demote_ahead_dropped = 0;
};

struct DevicePoolTieringOptions {
  // The pools' page size in tokens (DevicePoolsOptions::block_tokens).
  uint32_t block_tokens = 16;
  // Copy chunks that become evictable into the host tier ahead of their eviction, on a thread.
  bool demote_ahead = false;
  // Most chunks queued for that thread.
  uint64_t demote_ahead_queue = 4096;
};

class DevicePoolTiering {
 public:
  DevicePoolTiering(HostTier& host, DeviceRuntime& runtime, DevicePoolTieringOptions options);
  DevicePoolTiering(const DevicePoolTiering&) = delete;
  DevicePoolTiering& operator=(const DevicePoolTiering&) = delete;
  ~DevicePoolTiering();

  // Stores the chunk `key` of `layout`, evicted from `pool` and held in `pages`, in the host tier.
  void Demote(const KvLayout& layout, const DevicePool& pool, const ChunkKey& key,
              std::span<const uint32_t> pages);

  // Queues chunk `key` of `layout`, evictable in `pool` now, for a demotion ahead of its eviction
  // (nothing without demote_ahead, for the thread's own releases, or when the host tier holds
  // it). Cheap: called under the pool's lock.
  void DemoteAhead(const KvLayout& layout, DevicePool& pool, const ChunkKey& key, uint64_t owner);

  // DemoteAhead as a DevicePoolsOptions::on_evictable (this object must outlive the pools, and
  // be stopped before them).
  std::function<void(const KvLayout&, DevicePool&, const ChunkKey&, uint64_t)>
  DemoteAheadOnEvictable() {
    return [this](const KvLayout& layout, DevicePool& pool, const ChunkKey& key, uint64_t owner) {
      DemoteAhead(layout, pool, key, owner);
    };
  }

  // Returns once every chunk queued before the call is demoted or given up (tests).
  void FlushDemotionsAhead();
  // Drops the queued demotions ahead and waits for the one in progress; later ones are not
  // queued. Idempotent.
  void Stop();

  // Demote as a DevicePoolsOptions::on_evict (this object must outlive the pools).
  std::function<void(const KvLayout&, const DevicePool&, const ChunkKey&,
                     std::span<const uint32_t>)>
  DemoteOnEvict() {
    return [this](const KvLayout& layout, const DevicePool& pool, const ChunkKey& key,
                  std::span<const uint32_t> pages) { Demote(layout, pool, key, pages); };
  }

  // Brings chunk `key` from the host tier into `pool` (a pool of `layout`). true when it is
  // committed in the pool now (by this call or another writer); false when the host tier does not
  // hold it as a whole number of the pool's pages (kept blocks: each a whole number of them), or
  // in a form loads decode first, another writer is storing it, or the copy or the frame's
  // decode failed (counted). The pool's errors (kResourceExhausted: admission refused its pages).
  absl::StatusOr<bool> Promote(const KvLayout& layout, DevicePool& pool, const ChunkKey& key);

  DevicePoolTieringStats stats() const;

 private:
  enum class CopyDownOutcome { kCopied, kPresent, kFailed };
  struct QueuedDemotion {
    KvLayout layout;
    DevicePool* pool = nullptr;
    ChunkKey key;
  };

  // Promote of a chunk the host tier holds encoded (`lease`): its kept blocks when a
  // token-dropping codec thinned it; false for another codec's form.
  absl::StatusOr<bool> PromoteKept(const KvLayout& layout, DevicePool& pool, const ChunkKey& key,
                                   ChunkLease lease);
  // Runs `runs` on the stream and waits for them; with `digest`, folds every run's source bytes
  // into its digest 0 (the runtime must have digested_copies).
  absl::Status CopyAndWait(std::span<const CopyRun> runs, CopyDigests* digest);
  // Copies chunk `key` held in `pages` of `pool` into a host-tier chunk and commits it.
  CopyDownOutcome CopyDown(const KvLayout& layout, const DevicePool& pool, const ChunkKey& key,
                           std::span<const uint32_t> pages);
  // Counts a demotion's outcome (`ahead`: the thread's).
  void CountDemotion(CopyDownOutcome outcome, bool ahead);
  // The demotion thread's work: each queued chunk still in its pool and not in the host tier is
  // referenced, copied down, released.
  void DemoteQueued(std::span<QueuedDemotion> queued);

  HostTier& host_;
  DeviceRuntime& runtime_;
  const DevicePoolTieringOptions options_;
  mutable absl::Mutex mu_;
  std::unique_ptr<DeviceStream> stream_ ABSL_GUARDED_BY(mu_);
  DevicePoolTieringStats stats_ ABSL_GUARDED_BY(mu_);
  // With demote_ahead; declared last, so it stops before what it uses goes.
  std::unique_ptr<BackgroundWorker<QueuedDemotion>> demoter_;
};

}  // namespace strata::storage
