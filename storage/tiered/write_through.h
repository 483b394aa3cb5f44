// WriteThrough writes every chunk the host tier commits to the disk tier as well: the
// optional write-through of DESIGN.md section 4 (write-back on eviction is Demoter's). A chunk
// written through survives a daemon restart, and its later eviction costs no disk write (the
// demoter finds it on disk and skips it).
//
// OnStored, a ChunkObserver call made under the host tier's lock, only queues the key. The thread
// "strata-wthrough" takes up to max_batch_chunks keys at a time, leases each chunk from the host
// tier as a copy (HostTier::AcquireForCopy: not a load, so hit counters and the eviction policy
// are untouched), writes the batch with LowerTier::PutBatch straight from the arena pages (no
// copy) and releases the leases. A lease keeps its chunk from being evicted, so a batch holds at
// most max_batch_chunks chunks in memory beyond what the policy chose.
//
// Best effort, never wrong: a chunk already on disk, or gone from the host tier when its turn
// comes, is skipped (evicted ones are the demoter's to demote); a key that finds the queue full is
// dropped (counted), and write-back on eviction still keeps the chunk. A chunk removed from the
// host tier (Remove, Clear) while its write is in flight is removed from the disk tier once the
// write ends, so an operator's Clear is not undone. A lease that expires during the write means
// the pages may have been reused: that record is removed too (its checksum would fail any read).
//
// Lifetime: Start binds the host tier; keys stored before it are not queued. Stop() (also run by
// the destructor) drops the queue, waits for the batch in flight and joins. The disk tier must
// outlive the write-through; the host tier must be alive from Start to Stop, and the
// write-through (its observer) must outlive the host tier's calls to it.
//
// Thread-safety: every method is thread-safe. Lock order: host tier's lock, then mu_ (observer
// calls); the thread never calls the host tier while holding mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "storage/host/chunk_observer.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/background_worker.h"
#include "storage/tiered/host_forms.h"
#include "storage/tiered/lower_tier.h"

namespace strata::storage {

struct WriteThroughOptions {
  // Most keys waiting for their write; a commit past it is dropped (counted). At least 1.
  uint32_t max_queued_chunks = 1024;
  // Most chunks per LowerTier::PutBatch (one fdatasync and one index batch); at least 1.
  uint32_t max_batch_chunks = 4;
  // How long a chunk stays leased for its write; a write that outlasts it is undone (see above).
  std::chrono::nanoseconds lease = std::chrono::seconds(30);
  // The layouts that decode a chunk the host tier holds encoded by its turn ([host] codec): it
  // is written as it decodes. Nullable (such a chunk is skipped); not owned; must outlive it.
  const KnownLayouts* layouts = nullptr;
};

struct WriteThroughStats {
  uint64_t queued = 0;     // keys ever queued
  uint64_t written = 0;    // chunks the disk tier holds because of a write-through
  uint64_t skipped = 0;    // on disk already, or gone from the host tier before their turn
  uint64_t dropped = 0;    // found the queue full
  uint64_t failed = 0;     // the disk tier's Put failed (disk full, I/O error)
  uint64_t cancelled = 0;  // removed from the host tier (or lease expired) during the write
  uint64_t pending = 0;    // queued or being written now
};

class WriteThrough final : public ChunkObserver {
 public:
  // kInvalidArgument for a null disk tier or a zero option.
  static absl::StatusOr<std::unique_ptr<WriteThrough>> Create(LowerTier* disk,
                                                              const WriteThroughOptions& options);
  ~WriteThrough() override;
  WriteThrough(const WriteThrough&) = delete;
  WriteThrough& operator=(const WriteThrough&) = delete;

  // Starts writing through the commits of `host` (not null). Once only.
  void Start(HostTier* host);

  void OnStored(const ChunkKey& key, const ChunkKey& parent, uint32_t num_tokens,
                std::span<const uint32_t> token_ids) override;
  void OnRemoved(const ChunkKey& key, RemovalCause cause) override;
  void OnCleared() override;

  // Returns once every key queued before the call is written, skipped or failed.
  void Flush();
  // Drops the queue, waits for the batch in flight and joins the thread. Idempotent.
  void Stop();

  WriteThroughStats Stats() const;

 private:
  WriteThrough(LowerTier* disk, const WriteThroughOptions& options);
  // Leases, writes and releases one batch (on the worker's thread); undoes the writes of keys
  // cancelled meanwhile.
  void WriteBatch(std::span<const ChunkKey> keys);
  void WriteLeased(HostTier& host, std::span<const ChunkKey> keys);

  LowerTier* const disk_;
  const WriteThroughOptions options_;

  mutable absl::Mutex mu_;
  HostTier* host_ ABSL_GUARDED_BY(mu_) = nullptr;  // set once by Start
  // The batch being written, and those of its keys removed from the host tier meanwhile.
  absl::flat_hash_set<ChunkKey> in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<ChunkKey> cancelled_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> cancelled_count_{0};

  // Last: stopped before the members its callback uses go.
  BackgroundWorker<ChunkKey> worker_;
};

}  // namespace strata::storage
