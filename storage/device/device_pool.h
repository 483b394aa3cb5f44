// DevicePool is tier T0 of DESIGN.md section 4: chunk KV in device memory that the daemon
// allocates shareable through the DeviceRuntime (CUDA IPC on a GPU; a memfd on HostRuntime) and
// engines map at their handshake (DeviceRuntime::OpenShared of shared_handle()). Its memory is
// laid out as an engine's paged KV cache (DevicePoolGeometry): one region per layer, each of
// num_pages pages, where a page is one block of tokens of one layer. Page p of every layer is
// block p of the mapped pool, so an attention kernel's block table can name T0 pages in place
// and a chunk shared by many requests (MEPIC's canonical pages) is never copied per request.
//
// Chunk lifecycle:
//   Reserve (admission, then pages, evicting unreferenced chunks) -> the writer fills the pages
//   of every layer -> Commit | Abort
//   committed: found by Lookup / Acquire; evictable while no reference holds it
//   Remove: leaves the index at once; its pages are freed when its last reference is released
// Admission is checked before anything is evicted: a reservation that free pages plus evictable
// chunks cannot cover is refused (kResourceExhausted) and evicts nothing, so the pool never
// over-commits and never throws away chunks for a request it then rejects.
//
// References: Acquire takes one for an owner (a request of an engine session) and returns the
// chunk's pages; Release(ref_id) returns it, ReleaseOwner releases every reference of an owner
// (a session that died), AbortOwner aborts its reservations. A referenced chunk is never evicted,
// and its pages are never reused while referenced, removed or not.
//
// Eviction hands the chunk to DevicePoolOptions::on_evict, if any, while its pages still hold
// its KV (the daemon demotes it to the host tier: storage/tiered/device_pool_tiering.h), then
// frees its pages. DevicePoolOptions::on_evictable is told of every chunk that becomes evictable,
// so its KV can be copied down ahead of an eviction, off the pool's lock.
//
// Kept blocks: a chunk a token-dropping codec thinned (storage/codec/token_drop_codec.h) holds
// only its kept blocks, one page each, and records each page's position in the chunk (Reserve's
// `positions`, returned by Acquire): the fused-RoPE kernel reads page i at positions[i] onwards.
// Such a chunk is neither demoted nor told to on_evictable (it is not a chunk of the layout: its
// frame stays in the host tier, which promotes it again); an eviction drops it.
//
// Thread-safety: every method is thread-safe (one mutex; each call is O(pages it touches)).
// Ownership: the pool owns its allocation; the engines' mappings are theirs. Pointers from
// PageData are valid while the pool lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/device/device_runtime.h"

namespace strata::storage {

// How the pool's memory is laid out: num_layers regions of num_pages pages of page_bytes, layer
// after layer (the layout of a paged KV cache tensor per layer, stacked).
struct DevicePoolGeometry {
  uint32_t num_layers = 0;
  uint32_t num_pages = 0;
  // One page of one layer: a block of tokens, every plane (K then V for MHA).
  uint64_t page_bytes = 0;

  uint64_t layer_stride_bytes() const { return uint64_t{num_pages} * page_bytes; }
  uint64_t total_bytes() const { return layer_stride_bytes() * num_layers; }
  // Where page `page` of layer `layer` starts, from the pool's base.
  uint64_t offset(uint32_t layer, uint32_t page) const {
    return layer * layer_stride_bytes() + uint64_t{page} * page_bytes;
  }
  // kInvalidArgument naming the first problem: a zero field, a page_bytes that is not a
  // multiple of 256 (device allocation alignment, kept for every page), a total above 2^48.
  absl::Status Validate() const;
};

// The geometry of a pool of `num_pages` pages of `block_tokens` tokens of `layout`: page_bytes is
// one layer's bytes of a block (layout.layer_bytes(block_tokens)). kInvalidArgument for an
// invalid layout, a zero block or page count, or a block size that does not divide
// layout.chunk_tokens (a chunk is then a whole number of pages).
absl::StatusOr<DevicePoolGeometry> DevicePoolGeometryFor(const KvLayout& layout,
                                                         uint32_t block_tokens, uint32_t num_pages);

class DevicePool;

struct DevicePoolOptions {
  DevicePoolGeometry geometry;
  // The shareable allocation's name (HostRuntime: the memfd's, shown in /proc/<pid>/fd).
  std::string name = "strata-device-pool";
  // Called for each chunk evicted to make room for a reservation, under the pool's lock and
  // before its pages are reused: its key and pages, which still hold its KV. It may read them
  // (PageData, geometry) and must not call back into the pool. Null: evicted chunks are dropped.
  std::function<void(const DevicePool& pool, const ChunkKey& key, std::span<const uint32_t> pages)>
      on_evict;
  // Called when a committed chunk becomes evictable (its commit left it unreferenced, or its
  // last reference was released), under the pool's lock: its key and the owner whose commit or
  // release it was. It must be cheap and must not call back into the pool (the daemon queues
  // the chunk for demotion ahead of its eviction). Null: nobody is told.
  std::function<void(DevicePool& pool, const ChunkKey& key, uint64_t owner)> on_evictable;
};

// One contiguous run of a pool chunk's KV: `bytes` at `pool_offset` from the pool's base (a page
// of one plane of one layer) and at `chunk_offset` in the same chunk in its layout's chunk format
// (KvLayout: [layer][plane][token][kv_head][head_dim]).
struct PoolChunkRun {
  uint64_t pool_offset = 0;
  uint64_t chunk_offset = 0;
  uint64_t bytes = 0;
};

// The runs of a chunk of `layout` held in `pages` (in chunk order, block_tokens tokens each) of
// a pool of `geometry`: one per layer, plane and page, covering the chunk of
// pages.size() * block_tokens tokens. The geometry must be the layout's (DevicePoolGeometryFor).
std::vector<PoolChunkRun> PoolChunkRuns(const KvLayout& layout, uint32_t block_tokens,
                                        const DevicePoolGeometry& geometry,
                                        std::span<const uint32_t> pages);

// Why a reference is taken: for a request (counted in the pool's hits and misses), or for the
// pool's upkeep (not counted).
enum class PoolUse : uint8_t { kRequest, kUpkeep };

enum class PoolReserveOutcome {
  kReserved,        // `pages` are the chunk's: fill them, then Commit or Abort
  kAlreadyPresent,  // the chunk is committed already
  kInProgress,      // another writer holds a reservation for the key
};

struct PoolReservation {
  PoolReserveOutcome outcome = PoolReserveOutcome::kReserved;
  uint64_t id = 0;              // for Commit / Abort; kReserved only
  std::vector<uint32_t> pages;  // kReserved only, in chunk order
};

// A reference to a committed chunk: its pages, in chunk order, until Release(ref_id).
struct PoolChunkRef {
  uint64_t ref_id = 0;
  std::vector<uint32_t> pages;
  // Empty for a whole chunk (page i holds its block i); else each page's first token's position
  // in the chunk (the kept blocks of a thinned chunk, ascending).
  std::vector<uint32_t> positions;
};

struct DevicePoolStats {
  uint64_t capacity_pages = 0;
  uint64_t page_bytes = 0;  // of one layer; a page of every layer is num_layers times this
  uint64_t free_pages = 0;
  uint64_t committed_pages = 0;  // of chunks in the index
  uint64_t reserved_pages = 0;
  // Of removed chunks whose pages wait for their last reference.
  uint64_t pending_free_pages = 0;
  uint64_t referenced_pages = 0;  // of committed chunks with a reference (not evictable)
  uint64_t chunks = 0;            // committed, in the index
  uint64_t reservations = 0;
  uint64_t references = 0;  // outstanding
  uint64_t hits = 0;        // Acquire found the chunk
  uint64_t misses = 0;
  uint64_t commits = 0;
  uint64_t evictions = 0;
  uint64_t evicted_pages = 0;
  uint64_t removed = 0;
  // Reservations refused because free plus evictable pages could not cover them.
  uint64_t admission_rejects = 0;
};

class DevicePool {
 public:
  // Allocates the pool's memory through `runtime` (which must outlive the pool).
  // kInvalidArgument for a bad geometry; the runtime's errors (kResourceExhausted when the
  // memory is not there).
  static absl::StatusOr<std::unique_ptr<DevicePool>> Create(DeviceRuntime& runtime,
                                                            const DevicePoolOptions& options);
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;
  ~DevicePool();

  const DevicePoolGeometry& geometry() const { return geometry_; }
  // What an engine maps (see SharedMemoryHandle for the descriptor's ownership).
  SharedMemoryHandle shared_handle() const { return memory_->handle(); }
  // Page `page` of layer `layer` in the daemon's mapping (a device pointer under CUDA).
  std::byte* PageData(uint32_t layer, uint32_t page) const;

  // Reserves `num_pages` pages for chunk `key` on behalf of `owner`, evicting the least recently
  // used unreferenced chunks when free pages are short. kInvalidArgument for an empty key or a
  // page count of 0 or above the pool's; kResourceExhausted (nothing evicted) when free plus
  // evictable pages are fewer than num_pages. A committed or reserved key is an outcome.
  // `positions`: empty for a whole chunk; for a thinned one, each page's first token's position
  // in the chunk, strictly ascending (kInvalidArgument otherwise, or for a count that is not
  // num_pages).
  absl::StatusOr<PoolReservation> Reserve(const ChunkKey& key, uint32_t num_pages, uint64_t owner,
                                          std::span<const uint32_t> positions = {});
  // Publishes a reserved chunk. kNotFound when the reservation is unknown (aborted, by its
  // owner's death among others).
  absl::Status Commit(uint64_t reservation_id);
  // Frees a reservation's pages; unknown ids are ignored.
  void Abort(uint64_t reservation_id);
  // Aborts every reservation of `owner`; returns how many.
  size_t AbortOwner(uint64_t owner);

  // A reference to committed chunk `key` for `owner` (the chunk becomes the most recently used);
  // nullopt on a miss. `use`: kUpkeep for the pool's own upkeep (a copy down to the host tier),
  // which counts neither a hit nor a miss.
  std::optional<PoolChunkRef> Acquire(const ChunkKey& key, uint64_t owner,
                                      PoolUse use = PoolUse::kRequest);
  // Returns a reference. kNotFound for an unknown (or already released) reference.
  absl::Status Release(uint64_t ref_id);
  // Releases every reference of `owner`; returns how many.
  size_t ReleaseOwner(uint64_t owner);

  // Number of leading keys of `chain` committed here (no reference, no effect on recency).
  size_t Lookup(std::span<const ChunkKey> chain) const;
  // Removes a committed chunk from the index (its pages are freed once unreferenced); false when
  // there is none.
  bool Remove(const ChunkKey& key);

  DevicePoolStats Stats() const;
  // Checks that every page is free or held by exactly one chunk, and that the counters match.
  // kInternal naming the first broken invariant. O(pages): for tests.
  absl::Status CheckConsistency() const;

 private:
  enum class State : uint8_t { kReserved, kCommitted, kRemoved };
  struct Chunk {
    ChunkKey key;
    std::vector<uint32_t> pages;
    std::vector<uint32_t> positions;  // PoolChunkRef::positions
    bool whole() const { return positions.empty(); }
    uint32_t refs = 0;
    State state = State::kReserved;
    bool evictable = false;  // in lru_: committed, in the index, unreferenced
    std::list<Chunk*>::iterator lru_position;
  };
  struct Holder {
    Chunk* chunk = nullptr;
    uint64_t owner = 0;
  };

  DevicePool(const DevicePoolOptions& options, std::unique_ptr<ShareableAllocation> memory);

  void MakeEvictableLocked(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MakeUnevictableLocked(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a chunk out of the index; its pages are freed now when unreferenced, else at its
  // last Release.
  void DetachLocked(Chunk* chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreePagesLocked(const Chunk& chunk) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLocked(uint64_t ref_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(uint64_t reservation_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const DevicePoolGeometry geometry_;
  const std::function<void(const DevicePool&, const ChunkKey&, std::span<const uint32_t>)>
      on_evict_;
  const std::function<void(DevicePool&, const ChunkKey&, uint64_t)> on_evictable_;
  const std::unique_ptr<ShareableAllocation> memory_;

  mutable absl::Mutex mu_;
  // Reserved and committed chunks.
  absl::flat_hash_map<ChunkKey, std::unique_ptr<Chunk>> index_ ABSL_GUARDED_BY(mu_);
  // Removed chunks whose pages references still read.
  absl::flat_hash_map<Chunk*, std::unique_ptr<Chunk>> removed_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_pages_ ABSL_GUARDED_BY(mu_);  // a stack
  // Committed, unreferenced chunks, least recently used first.
  std::list<Chunk*> lru_ ABSL_GUARDED_BY(mu_);
  uint64_t evictable_pages_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t committed_pages_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reserved_pages_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t pending_free_pages_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Holder> reservations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Holder> refs_ ABSL_GUARDED_BY(mu_);
  // Each owner's reservation and reference ids, for AbortOwner / ReleaseOwner.
  absl::flat_hash_map<uint64_t, absl::flat_hash_set<uint64_t>> owner_reservations_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::flat_hash_set<uint64_t>> owner_refs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  DevicePoolStats counters_ ABSL_GUARDED_BY(mu_);  // the event counters (hits ... rejects)
};

}  // namespace strata::storage
