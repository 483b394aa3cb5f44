// Promoter promotes chunks from the tiers below the host tier into it in the background: the
// prefetch an engine asks for when it queues a request whose prefix went to disk (or a peer), so
// that the request's PrepareLoad later finds the chunks in the host tier instead of waiting for
// their reads (DESIGN.md section 4, "a prefetch call the connector uses for queued
// requests").
//
// Enqueue never touches the disk: it locates the prefix in memory (LocatePrefix) and queues the
// chunks that only lower tiers hold. The thread "strata-promoter" promotes them in queue order,
// each from the nearest lower tier that holds it then, with PromoteChunk (io_uring reads into the
// reserved arena pages) and soft-pins each for pin_ttl while the tier's soft pins stay within
// max_pinned_fraction of it: the eviction policy cannot tell a prefetched chunk from any other
// recent one, and promoting the next chunk of a prefix into a full tier could otherwise evict the
// one before it. A prefetch is a hint: chunks that meanwhile reached the host tier, left the lower
// tiers, or are being written by another writer are skipped; a failed promotion is counted and
// loses nothing (a lower tier drops a corrupt record, PromoteChunk aborts its reservation); Stop
// drops what is queued.
//
// Lifetime: Stop() (also run by the destructor) drops the queue and joins the thread. The lower
// tiers and the host tier must outlive the promoter, or it must be stopped before either goes; the
// host tier's eviction listener runs on the promoter's thread when a promotion makes room.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/background_worker.h"
#include "storage/tiered/demoter.h"
#include "storage/tiered/lower_tier.h"
#include "storage/tiered/prefix_locator.h"

namespace strata::storage {

struct PromoterOptions {
  // Most chunks queued or being promoted at once; at least 1.
  uint32_t max_queued_chunks = 1024;
  // Chunks waiting for their disk write are found, and promoted, from its staging buffers;
  // nullable; not owned; must outlive the promoter.
  const Demoter* staged = nullptr;
  // A promoted chunk is soft-pinned for this long, so that promoting the rest of a prefix (or
  // other traffic) does not evict it before the queued request loads it; 0 pins nothing.
  std::chrono::nanoseconds pin_ttl = std::chrono::seconds(10);
  // Pins stop while the host tier's soft-pinned bytes would exceed this fraction of its
  // capacity: prefetches never pin the engines' saves out of the tier.
  double max_pinned_fraction = 0.5;
};

struct PromoterStats {
  uint64_t queued = 0;    // chunks ever queued
  uint64_t promoted = 0;  // committed in the host tier by the promoter
  uint64_t skipped = 0;   // already in the host tier, gone from below, or another writer's
  uint64_t failed = 0;    // a promotion error (host tier full, a read failed, ...)
  uint64_t pinned = 0;    // of the promoted, soft-pinned for pin_ttl
  uint64_t pending = 0;   // queued or being promoted now
};

class Promoter {
 public:
  // Starts the promoter's thread over `lower` (top down, not owned). kInvalidArgument for no
  // lower tier, a null tier or max_queued_chunks 0.
  static absl::StatusOr<std::unique_ptr<Promoter>> Create(std::vector<LowerTier*> lower,
                                                          HostTier* host,
                                                          const PromoterOptions& options);
  ~Promoter();
  Promoter(const Promoter&) = delete;
  Promoter& operator=(const Promoter&) = delete;

  // Queues, in chain order, the chunks of the leading run of `chain` (keys of `layout`; the run
  // LocatePrefix finds across the tiers) that a lower tier holds and the host tier does not,
  // skipping chunks already queued or being promoted. Returns how many it queued; stops queueing
  // when the queue is full. kInvalidArgument for an unusable layout or a key of another layout;
  // kResourceExhausted when chunks needed promotion but the queue had no room for any;
  // kFailedPrecondition after Stop.
  absl::StatusOr<uint32_t> Enqueue(const KvLayout& layout, std::span<const ChunkKey> chain);

  // Waits while the promoter's thread is promoting `key` (a chunk only queued does not count);
  // returns whether it waited. A load that finds the promoter's reservation on a chunk
  // (PromoteOutcome::kInProgress) waits here, then leases the promoted chunk.
  bool AwaitInFlight(const ChunkKey& key);

  // Returns once every chunk queued before the call is promoted, skipped or failed.
  void Flush();
  // Drops the queue, waits for the promotion in progress and joins the thread; Enqueue fails
  // from then on. Idempotent.
  void Stop();

  PromoterStats Stats() const;

 private:
  struct Queued {
    ChunkKey key;
    std::shared_ptr<const KvLayout> layout;
  };

  Promoter(std::vector<LowerTier*> lower, HostTier* host, const PromoterOptions& options);
  // Promotes one chunk (on the worker's thread).
  void Promote(const Queued& item);
  // Soft-pins a chunk just promoted (of at most `max_chunk_bytes`), within the pin budget.
  void PinPromoted(const ChunkKey& key, uint64_t max_chunk_bytes);

  const std::vector<LowerTier*> lower_;
  HostTier* const host_;
  const PromoterOptions options_;

  mutable absl::Mutex mu_;
  // Keys queued or being promoted.
  absl::flat_hash_set<ChunkKey> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The chunk the thread is promoting now.
  std::optional<ChunkKey> in_flight_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> promoted_{0};
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> pinned_{0};

  // Last: stopped before the members its callbacks use go.
  BackgroundWorker<Queued> worker_;
};

}  // namespace strata::storage
