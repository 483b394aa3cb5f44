// Demoter is the host tier's EvictionListener when the disk tier is on: it demotes every chunk
// the host tier evicts to the disk tier (write-back), asynchronously, on its own thread.
//
// The host tier frees an evicted chunk's pages as soon as OnEvicted returns, so OnEvicted copies
// the payload into a 4 KiB-aligned staging buffer (a memcpy, ~10x faster than the disk write)
// and queues it; the demoter's thread writes queued chunks with LowerTier::PutBatch (up to
// max_batch_chunks per call, one fdatasync and one index batch each) and frees their buffers.
// The staging buffers, queued or being written, never take more than max_queued_bytes: an
// eviction that would exceed it is written on the evicting thread instead, straight from the
// arena pages (backpressure; nothing is dropped). max_queued_bytes = 0 makes every demotion
// synchronous.
//
// A chunk the disk tier holds already (written through, or promoted from it) is counted as
// demoted and not copied. A chunk the host tier held encoded (Compress) is decoded on the
// evicting thread first (WithChunkBytes, with DemoterOptions::layouts): the tier below is given
// the chunk, never the host tier's frame; one that does not decode is counted as failed.
//
// Visibility: a chunk is staged from the end of its copy in OnEvicted until its write finished
// and the disk tier shows it (or the write failed): FindStaged hands out its staging buffer, so
// LocatePrefix counts it and PromoteChunk promotes it from memory (prefix_locator.h,
// chunk_transfer.h). A chunk a promotion evicts on the loads thread is staged by the time the
// promotion returns, so a PrepareLoad that evicts a later chunk of its own prefix still finds
// it. Only while another thread's OnEvicted copies the payload is a chunk in neither tier (a
// lookup then misses it: the engine recomputes; never wrong KV, keys name their content).
// Flush() waits for every demotion queued so far; callers that need the disk tier to hold them
// (Drain) call it first. Discard() drops the queued demotions of chunks about to be cleared.
//
// Lifetime: Stop() (also run by the destructor) stops queueing, writes everything queued and
// joins the thread; evictions after it (or racing with it) are written synchronously, so no
// demotion is lost. The
// disk tier must outlive the demoter; the demoter must outlive the host tier's use of it as
// listener, or be stopped before the host tier goes.
//
// Thread-safety: every method is thread-safe. OnEvicted runs on evicting threads (host tier
// contract); the writes run on the thread "strata-demoter". A failed write is counted and loses
// only the cached copy.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "storage/host/eviction_listener.h"
#include "storage/io/aligned_buffer.h"
#include "storage/tiered/background_worker.h"
#include "storage/tiered/host_forms.h"
#include "storage/tiered/lower_tier.h"

namespace strata::storage {

// An evicted chunk's payload held for its disk write; immutable once staged.
struct StagedPayload {
  AlignedBuffer bytes;  // the payload, padded to 4 KiB
  uint64_t payload_bytes = 0;
  uint64_t checksum = 0;  // the host tier's xxh3-64 of the payload
  uint32_t num_tokens = 0;
  std::string tenant;  // the host tier's tenant of the chunk ("" for none)

  std::span<const std::byte> payload() const { return bytes.span().first(payload_bytes); }
};

struct DemoterOptions {
  // Most bytes of evicted payloads held in staging buffers (see above); 0: write synchronously.
  // Staged buffers a reader still holds (FindStaged) may outlive their place in the budget.
  uint64_t max_queued_bytes = 256ull << 20;
  // Most chunks per LowerTier::PutBatch; at least 1.
  uint32_t max_batch_chunks = 4;
  // The layouts that decode evicted chunks the host tier held encoded; nullable (such a chunk is
  // then lost, counted as failed); not owned; must outlive the demoter.
  const KnownLayouts* layouts = nullptr;
};

class Demoter final : public EvictionListener {
 public:
  // Starts the demoter's thread. kInvalidArgument for a null disk tier or max_batch_chunks 0.
  static absl::StatusOr<std::unique_ptr<Demoter>> Create(LowerTier* disk,
                                                         const DemoterOptions& options);
  ~Demoter() override;
  Demoter(const Demoter&) = delete;
  Demoter& operator=(const Demoter&) = delete;

  void OnEvicted(const ChunkKey& key, const PayloadView& payload, uint64_t checksum,
                 uint32_t num_tokens, std::string_view tenant,
                 const StoredEncoding& encoding) override;

  // The staged payload of `key` when it waits for (or is in) its disk write, else nullptr. The
  // buffer stays valid and unchanged while the caller holds it.
  std::shared_ptr<const StagedPayload> FindStaged(const ChunkKey& key) const;
  bool IsStaged(const ChunkKey& key) const;

  // Returns once every demotion queued before the call is written (or has failed), held or not.
  void Flush();
  // Drops the queued demotions of the chunks `doomed` selects (Clear removes them: writing them
  // first would be wasted), then waits for the write in progress. On return none of the chunks
  // it selects that were evicted before the call is staged or being written. Returns how many
  // were dropped.
  uint64_t Discard(absl::FunctionRef<bool(const ChunkKey&)> doomed);
  // For tests that need chunks to stay staged: while held, the demoter's thread writes queued
  // chunks only when a Flush or Stop asks for them; evictions still stage and queue (within
  // max_queued_bytes). Releasing the hold lets the queue drain in the background again.
  void SetHeld(bool held);
  // Writes everything queued and joins the thread; later evictions are written synchronously.
  // Idempotent.
  void Stop();

  // Chunks written to the disk tier (or found there already), writes that failed, and how many
  // of the demotions ran synchronously on the evicting thread.
  uint64_t demoted() const { return demoted_.load(std::memory_order_relaxed); }
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }
  uint64_t written_inline() const { return written_inline_.load(std::memory_order_relaxed); }

 private:
  struct Queued {
    ChunkKey key;
    std::shared_ptr<const StagedPayload> staged;
  };

  Demoter(LowerTier* disk, const DemoterOptions& options);
  // Writes one batch (on the worker's thread) and unstages it.
  void WriteBatch(std::span<Queued> batch);
  // Takes written, failed or dropped chunks out of staged_ and the budget.
  void Unstage(std::span<const Queued> items);
  // OnEvicted of a plain chunk: stages it for its write, or writes it here.
  void Demote(const ChunkKey& key, const PayloadView& payload, uint64_t checksum,
              uint32_t num_tokens, std::string_view tenant);
  void Count(const absl::Status& status);

  LowerTier* const disk_;
  const DemoterOptions options_;

  mutable absl::Mutex mu_;
  // The chunks queued or being written, by key (the latest eviction of a key).
  absl::flat_hash_map<ChunkKey, std::shared_ptr<const StagedPayload>> staged_ ABSL_GUARDED_BY(mu_);
  // Staging bytes of chunks being copied, queued or being written.
  uint64_t staged_bytes_ ABSL_GUARDED_BY(mu_) = 0;

  std::atomic<uint64_t> demoted_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> written_inline_{0};

  // Last: stopped before the members its callback uses go.
  BackgroundWorker<Queued> worker_;
};

}  // namespace strata::storage
