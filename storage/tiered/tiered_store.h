// TieredStore composes the tiers a daemon has (DESIGN.md section 4, "Composition"): the host tier
// (T1, the shared arena engines read and write) and the tiers below it, top down: the disk tier
// (T2) when configured, then the tiers registered with it (TieredStoreOptions::lower), with what
// moves chunks between them: the demoter (host evictions written down), the promoter
// (prefetches read up), write-through, and the store's own threads for loads and for operators'
// moves. The daemon's adapters (engine sessions, control service, metrics) hold one store and
// know nothing of the tiers below the host tier.
//
// Roles of the lower tiers: the nearest (the first) takes the host tier's evictions, its
// write-through and Drain; every one is a source for loads and prefetches, searched top down (a
// chunk comes from the nearest tier that holds it); Move and Clear name any tier.
//
// What it offers:
//   - LocatePrefix: the tier of each leading chunk of a chain, from the tiers' in-memory indexes.
//     LocatePrefixOrAsk adds what tiers that ask (the remote tier) learn, completing later.
//   - AcquireForLoad: leases a chain's chunks for a load. Host hits are leased on the caller's
//     thread at once. When the first chunk the host tier lacks plain is held encoded (Compress)
//     or in a lower tier, the rest of the load (decoding in place, promotion into the host tier,
//     then leasing) runs on the thread "strata-loads" and completes through a callback: the
//     caller's thread (the session thread, which serves every engine) never waits for disk I/O
//     or a codec.
//   - Prefetch: queues a chain's lower-tier chunks for background promotion.
//   - Move, Clear, FlushToLowerTiers: operators' moves, run synchronously by the caller; Submit
//     runs them on the thread "strata-tiered" for callers that must not block (gRPC handlers).
//   - Recode: Compress and Decompress, of host chunks in place (HostForms) or of a lower tier's;
//     drop_h2o reads the importance engines reported (importance(): ImportanceBook).
//   - Stats: per tier, and of the movement between tiers.
// What copies a host chunk below (the demoter, Move, Drain) writes it as it decodes: tiers below
// are never given the host tier's encoded frames.
//
// Threading: every method is thread-safe. Callbacks (AcquireForLoad's `done`, Submit's tasks) run
// on the store's threads, never on the caller's, and must not call Stop.
//
// Lifecycle and ownership: Create opens the disk tier (recovering what it held), takes the
// registered tiers and creates
// the host tier, with the demoter as its eviction listener and `observer` (plus write-through and
// the [host] codec's compressor) as its observer. Stop() (also run by the destructor): runs the
// loads and tasks already accepted (their callbacks run), drops queued prefetches and
// write-throughs, writes queued demotions, and unregisters the arena from the lower tiers;
// AcquireForLoad past a lower-tier miss, Submit and Prefetch fail from then on. Leases handed out
// stay valid after Stop but must be released before the store is destroyed.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/codec/codec.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/lower_tier.h"
#include "storage/tiered/task_pool.h"
#include "storage/tiered/tier.h"

namespace strata::storage {

class DiskTier;
class Demoter;
class HostCompressor;
class HostForms;
class KnownLayouts;
class ImportanceBook;
class Promoter;
class TaskThread;
class WriteThrough;

// The disk tier (T2), opened by the store.
struct TieredDiskOptions {
  // Holds the segment files and the index; created when missing.
  std::string directory;
  uint64_t capacity_bytes = 0;
  uint64_t segment_bytes = 256ull << 20;
  // Told about the disk tier's index changes (DiskTierOptions::observer); nullable; not owned;
  // must outlive the store.
  ChunkObserver* observer = nullptr;
  // The codec chunks written to disk are encoded with (CodecRegistry's names; empty: none), and
  // its parameters: see DiskLowerTier.
  std::string codec;
  CodecParams codec_params;
  // Tenants whose chunks are stored otherwise: tenant -> its codec ("" : as they are) and
  // parameters, in place of `codec` (DiskEncodingOptions::codecs).
  struct TenantCodec {
    std::string codec;
    CodecParams params;
  };
  std::map<std::string, TenantCodec> tenant_codecs;
  // Threads that decode encoded chunks as they are promoted (DiskEncodingOptions::
  // decode_threads), and as many that recode chunks for Recode (Compress, Decompress); 0: the
  // reading thread decodes them, and Recode's caller recodes them one by one.
  uint32_t codec_threads = CoresUpTo(4);
};

// How chunks move between the host tier and the tiers below it.
struct MovementOptions {
  // Bytes of evicted payloads staged for their background write to the nearest lower tier; 0
  // writes on the evicting thread (Demoter).
  uint64_t demotion_queue_bytes = 256ull << 20;
  // Write every committed chunk to the nearest lower tier as well, in the background
  // (WriteThrough).
  bool write_through = false;
  // Most chunks queued for prefetch promotion (Promoter).
  uint32_t prefetch_queue_chunks = 1024;
  // Register the host arena with every lower tier (LowerTier::RegisterMemory: the disk tier's
  // fixed buffers). Only for a prefaulted arena: registering pins, and so allocates, every page.
  bool register_arena = false;
};

// [host] codec: the chunks the host tier commits are compressed in place in the background
// (HostCompressor) with `codec` (CodecRegistry's names; empty: none) and `params`, or those of
// the tenants in `tenant_codecs` with theirs ("" : kept as they are). Nothing is compressed when
// no codec is named at all.
struct HostCodecOptions {
  std::string codec;
  CodecParams params;
  std::map<std::string, TieredDiskOptions::TenantCodec> tenant_codecs;
  // Threads that recode chunks for Recode (Compress, Decompress), with or without a codec here;
  // with a disk tier, the larger of this and its codec_threads. 0: Recode's caller recodes them
  // one by one.
  uint32_t recode_threads = CoresUpTo(4);
};

struct TieredStoreOptions {
  // The host tier. `listener` must be null (the store sets its demoter); `observer` is kept and
  // gets the host tier's events beside write-through.
  HostTierOptions host;
  HostCodecOptions host_codec;
  // No disk tier when empty.
  std::optional<TieredDiskOptions> disk;
  // Tiers registered below the disk tier (below the host tier when there is none), top down:
  // each of a Tier below the one before it (the disk tier, when configured, comes first). How a
  // tier the store does not open itself (the remote tier) joins. The store owns them from Create.
  std::vector<std::unique_ptr<LowerTier>> lower;
  MovementOptions movement;
};

// Most chunks one batched promotion reserves and reads together: 8 chunks of 256 tokens of a
// Llama-3-8B layout are 256 MiB, enough to keep the disk's queue full between chunks.
inline constexpr size_t kPromotionRunChunks = 8;

struct LoadOptions {
  // Lease duration; the host tier's default when empty.
  std::optional<std::chrono::nanoseconds> lease;
  // The session the leases and promotions belong to (HostTier owner).
  uint64_t owner = 0;
  // The reader checks each chunk's checksum as it copies (HostTier::Acquire).
  bool reader_verifies = false;
  // The codecs whose frames the reader decodes itself (a connector that decodes on the engine's
  // device), so a host chunk held in one of them is leased as it is (ChunkLease::encoding() says
  // so) instead of decoded back in place first. Empty: every chunk plain.
  CodecSet reader_decodes;
};

// What a load leased: leases[i] for keys[i] of the leading chunks, then `failure` for the first
// chunk that could not be leased (OK when all were); chunks after it are not leased (a load is
// a prefix: the engine recomputes from the first failure on).
struct LoadLeases {
  std::vector<ChunkLease> leases;
  absl::Status failure;
  // Chunks of `leases` promoted from a lower tier for this load.
  uint32_t promoted_chunks = 0;
};

struct MoveResult {
  uint64_t moved_chunks = 0;
  uint64_t already_in_target = 0;
  uint64_t missing_chunks = 0;
};

// What Recode did to the chunks it was given (LowerTier::RecodeOutcome, counted), the bytes the
// recoded ones took before and after, and the largest errors of their new forms.
struct RecodeTotals {
  uint64_t recoded = 0;
  uint64_t already_in_form = 0;
  uint64_t missing = 0;
  uint64_t not_smaller = 0;
  uint64_t no_layout = 0;
  uint64_t busy = 0;           // host tier only
  uint64_t no_importance = 0;  // host tier only: drop_h2o, no importance reported
  uint64_t stored_bytes_before = 0;
  uint64_t stored_bytes_after = 0;
  KvError max_error;  // each field the largest over the recoded chunks; NaN when one's is NaN
};

// Which chunks Clear removes: the keys given, or every chunk of a layout, or every chunk.
struct ClearSelection {
  std::optional<absl::flat_hash_set<ChunkKey>> keys;  // when set, these alone
  uint64_t layout_fingerprint = 0;                    // otherwise: 0 = every chunk
};

struct TieredStoreStats {
  HostTierStats host;
  std::vector<LowerTierStats> lower;  // one per tier below the host tier, top down
  MovementStats movement;
};

class TieredStore {
 public:
  // Opens the disk tier (if any), takes the registered tiers and creates the host tier and the
  // movers. kInvalidArgument for registered tiers out of that order (or null); the tiers'
  // errors, annotated with their names.
  static absl::StatusOr<std::unique_ptr<TieredStore>> Create(TieredStoreOptions options);
  ~TieredStore();
  TieredStore(const TieredStore&) = delete;
  TieredStore& operator=(const TieredStore&) = delete;

  // The host tier: engines reserve, commit and lease there directly; pins and listings are its.
  HostTier& host() { return *host_; }
  const HostTier& host() const { return *host_; }
  // The tiers this store has, top down (kHost first).
  std::vector<Tier> tiers() const;
  bool has(Tier tier) const;
  // Whether any tier is below the host tier: when none, every operation is in memory.
  bool has_lower_tiers() const;

  // The tier of each leading chunk of `chain`, stopping at the first chunk in no tier. In memory
  // only; not a snapshot (chunks may move meanwhile, so a later load may still miss).
  std::vector<Tier> LocatePrefix(std::span<const ChunkKey> chain) const;

  using LocateDone = absl::AnyInvocable<void(std::vector<Tier>) &&>;
  // LocatePrefix, with what tiers that learn of their chunks by asking (the remote tier's peers)
  // find within their budget. When the tiers in memory cover the whole chain or no tier asks, the
  // answer is returned at once (`done` never called); otherwise nullopt, and `done` gets the
  // answer on the asking tier's thread once every such tier has answered. Never blocks.
  // `budget`: how long the asking tiers may ask (0: their own budget).
  std::optional<std::vector<Tier>> LocatePrefixOrAsk(
      std::span<const ChunkKey> chain, LocateDone done,
      std::chrono::microseconds budget = std::chrono::microseconds(0));

  // Tells the tiers below the host tier of a layout engines store chunks of (LowerTier::
  // NoteLayout): an engine session's handshake. kResourceExhausted when kMaxKnownLayouts other
  // layouts are known (host_forms.h).
  absl::Status NoteLayout(const KvLayout& layout);

  // The importance engines reported of position-independent chunks' tokens, which drop_h2o's
  // Recode of a host chunk keeps the heaviest blocks by.
  ImportanceBook& importance() { return *importance_; }

  // Every tier that holds `key` now, top down (a chunk staged for its demotion counts as in the
  // tier it is written to). In memory only.
  std::vector<Tier> TiersOf(const ChunkKey& key) const;

  using LoadDone = absl::AnyInvocable<void(LoadLeases) &&>;
  // Leases `keys` (a chain of `layout`) in order for a load, stopping at the first failure (see
  // LoadLeases). Returns the result at once when the host tier holds every chunk plain (or encoded
  // in a form the reader decodes: LoadOptions::reader_decodes), or when
  // the first chunk it lacks is in no tier (failure kAborted: redo the lookup), and then never
  // calls `done`. Otherwise returns nullopt: the leases taken so far and the rest of the load go
  // to the thread "strata-loads", which decodes host chunks held encoded back in place
  // (HostForms::DecodeInPlace: a chunk that does not decode fails the load there, kDataLoss),
  // promotes the lower-tier chunks (kPromotionRunChunks at a time, one queue of reads each) and
  // leases them, and calls `done` there with the whole result.
  // After Stop that second step fails with kUnavailable (through the returned result).
  std::optional<LoadLeases> AcquireForLoad(std::shared_ptr<const KvLayout> layout,
                                           std::vector<ChunkKey> keys, const LoadOptions& options,
                                           LoadDone done);

  // Queues the lower-tier chunks of `chain`'s cached prefix for background promotion and returns
  // how many it queued (0 without lower tiers). Never touches the disk. Promoter::Enqueue's
  // errors.
  absl::StatusOr<uint32_t> Prefetch(const KvLayout& layout, std::span<const ChunkKey> chain);

  // For peers (the remote server), which name chunks by key alone. The description of `key`
  // when a tier below the host tier other than the remote tier holds it (a peer's question is
  // never passed on to other peers), or the demoter holds it for its write there. In memory
  // only.
  std::optional<LowerTier::ChunkInfo> DescribeBelowHost(const ChunkKey& key) const;
  // Promotes those of `keys` that such a tier holds and the host tier lacks into the host tier,
  // on the thread "strata-loads", at the size each was recorded with (PromoteRunAsRecorded), and
  // decodes those the host tier holds encoded back in place (HostForms::DecodeInPlace), then
  // calls `done` there, whatever the outcomes (the caller leases what arrived). false after
  // Stop: `done` is dropped uncalled. Counted in MovementStats::peer_promoted and load_decoded.
  bool PromoteForPeer(std::vector<ChunkKey> keys, absl::AnyInvocable<void() &&> done);

  // Moves `keys` into `target` (a chunk is never in no tier meanwhile). Into the host tier: the
  // chunk is promoted from the nearest lower tier holding it, then removed from every lower tier.
  // Into a lower tier: written there from the host tier (or, held only by another lower tier,
  // through the host tier), then removed from the host tier; other lower tiers keep their
  // copies. Moving out of a lower tier needs the keys' layout (`layout`, else kInvalidArgument).
  // Blocks on I/O. kFailedPrecondition for a tier the store lacks; the tiers' errors.
  absl::StatusOr<MoveResult> Move(std::span<const ChunkKey> keys, Tier target,
                                  const KvLayout* layout);
  // Stores each of `keys` that `tier` holds in the form `recoding` names (Compress and
  // Decompress): the host tier's chunks in place (HostForms::Recode), a lower tier's by
  // LowerTier::Recode; demotions queued before the call are written first, so a chunk evicted
  // just before is recoded with the rest. The chunks are recoded side by side on the store's
  // recode threads (HostCodecOptions::recode_threads, TieredDiskOptions::codec_threads) and the
  // caller's, which blocks until all
  // are done. kFailedPrecondition for a tier the store lacks or a tier that keeps no encoded
  // chunks. The tier's first error (by key order) is the answer, and it stops the call: chunks
  // not started yet are left as they were; those under way finish, recoded.
  absl::StatusOr<RecodeTotals> Recode(std::span<const ChunkKey> keys, Tier tier,
                                      const LowerTier::Recoding& recoding);
  // One page of the chunks `tier` (a tier below the host tier; the host tier lists through
  // host().ListChunks) holds: LowerTier::List. kFailedPrecondition for a tier the store lacks,
  // and for a tenant filter on a tier that records no tenants; kInvalidArgument for the host
  // tier; the tier's errors. May block on the tier's index I/O.
  absl::StatusOr<LowerTier::ListPage> ListBelowHost(Tier tier,
                                                    const LowerTier::ListOptions& options) const;
  // The keys of the chunks `tenant` stored ("" is the tenant of requests without a salt, and of
  // disk records that name none) that `tier` holds, or with nullopt that any tier recording
  // tenants holds (the host tier and each LowerTier::records_tenants() tier), each once.
  // Demotions queued before the call are written first, so a chunk evicted just before is found
  // where it went. kFailedPrecondition for a tier the store lacks or one that records no
  // tenants; the tiers' listing errors. Blocks on I/O.
  absl::StatusOr<std::vector<ChunkKey>> TenantKeys(const std::string& tenant,
                                                   std::optional<Tier> tier);
  // Removes the selected chunks from `tier` (every tier when empty); demotions queued before the
  // call are written first, so a chunk evicted just before is cleared with the rest. Blocks on
  // disk I/O.
  absl::StatusOr<RemoveResult> Clear(const ClearSelection& selection, std::optional<Tier> tier);
  // Gives every host chunk a copy in the nearest lower tier (queued demotions first), so a
  // restart finds it; returns how many chunks it wrote. 0 without lower tiers. Blocks on I/O.
  absl::StatusOr<uint64_t> FlushToLowerTiers();
  // Runs `task` on the thread "strata-tiered"; false after Stop (the task is destroyed unrun).
  // Without lower tiers nothing blocks: callers may as well run inline.
  bool Submit(absl::AnyInvocable<void() &&> task);

  // Returns once everything queued before the call has run: loads, operators' tasks,
  // prefetches, write-throughs and demotions.
  void Flush();

  TieredStoreStats Stats() const;

  // For tests that need evicted chunks to stay staged for their demotion (Demoter::SetHeld).
  void HoldDemotionsForTesting(bool held);

  // See the lifecycle above. Idempotent.
  void Stop();

 private:
  TieredStore() = default;

  // A load's lease of `key` in the host tier: plain, or encoded in a form the reader decodes
  // (counted in load_encoded); nullopt when absent or held in another form.
  absl::StatusOr<std::optional<ChunkLease>> AcquireHostForLoad(const ChunkKey& key,
                                                               const LoadOptions& options);
  // The load's slow part, on the loads thread: goes on from keys[leased.leases.size()].
  void ContinueLoad(const KvLayout& layout, std::span<const ChunkKey> keys,
                    const LoadOptions& options, LoadLeases& leased);
  // The lower tier `tier` names; null when the store lacks it.
  LowerTier* FindTier(Tier tier) const;
  // The nearest lower tier holding `key` (its staged demotion counts); null when none does.
  LowerTier* FindBelow(const ChunkKey& key) const;
  // The end of the run of keys that starts at keys[first] (which `source` holds): it goes on,
  // up to kPromotionRunChunks keys, while the host tier lacks them and `source` holds them.
  size_t PromotionRunEnd(std::span<const ChunkKey> keys, size_t first,
                         const LowerTier* source) const;
  enum class MoveOutcome { kMoved, kAlreadyThere, kMissing };
  // Move of one chunk into `into` (null: the host tier).
  absl::StatusOr<MoveOutcome> MoveOne(const ChunkKey& key, LowerTier* into, const KvLayout* layout);

  // Declared in dependency order: destroyed bottom up.
  std::unique_ptr<KnownLayouts> layouts_;
  std::unique_ptr<ImportanceBook> importance_;
  std::unique_ptr<DiskTier> disk_tier_;
  // The tiers below the host tier, top down (the disk tier through DiskLowerTier first, when
  // configured); `lower_` views `owned_lower_`. Every mover speaks to them through LowerTier alone.
  std::vector<std::unique_ptr<LowerTier>> owned_lower_;
  std::vector<LowerTier*> lower_;
  std::unique_ptr<Demoter> demoter_;
  std::unique_ptr<WriteThrough> write_through_;
  std::unique_ptr<HostCompressor> compressor_;
  std::unique_ptr<ChunkObserverFanout> observers_;
  std::unique_ptr<HostTier> host_;
  std::unique_ptr<HostForms> host_forms_;
  std::unique_ptr<Promoter> promoter_;
  std::unique_ptr<TaskThread> loads_;
  // Recode's threads ("strata-recode"), which the maintenance thread's tasks use.
  std::unique_ptr<TaskPool> recoders_;
  std::unique_ptr<TaskThread> maintenance_;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> async_loads_{0};
  std::atomic<uint64_t> decoded_loads_{0};
  std::atomic<uint64_t> encoded_loads_{0};
  std::array<std::atomic<uint64_t>, kTierCount> load_promoted_{};  // by the tier promoted from
  std::atomic<uint64_t> peer_promoted_{0};
};

}  // namespace strata::storage
