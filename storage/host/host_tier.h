// HostTier holds committed chunks of KV in DRAM, in a memfd shared arena that the daemon maps
// and engines map too (zero-copy). It is tier T1 of DESIGN.md section 4.
//
// Chunk lifecycle:
//   Reserve -> (caller fills the WriteReservation's pages) -> Commit | Abort
//   committed: visible to Lookup / Acquire; evictable unless leased, pinned or reserved
//   Remove / eviction / checksum failure: gone from the index at once; pages freed once no
//   unexpired lease reads them (eviction never touches a chunk under an unexpired lease)
//
// Thread-safety: every method is thread-safe. Lookup and Contains take only index-shard reader
// locks, one at a time; the other operations take the tier lock briefly. Payload checksums (Commit,
// verified loads) and EvictionListener calls run with no tier lock held.
//
// Ownership: the tier owns the arena and every chunk. Callers hold move-only handles:
// WriteReservation (write access to the pages of one uncommitted chunk) and ChunkLease (read
// access to one committed chunk until its deadline). Both must be destroyed, committed or
// aborted before the tier is destroyed (checked). Handles may be used and destroyed on any
// thread, but one handle must not be used by two threads at once.
//
// The lease contract: a lease protects its chunk from eviction and keeps its pages from being
// reused until the lease is destroyed or its deadline passes, whichever comes first. After the
// deadline the chunk may be evicted or its pages reused under a reader that is still copying, so
// a reader must finish within the deadline and must check expired() after copying: bytes copied
// under an expired lease are not trustworthy (the daemon re-validates before reporting success).
// This keeps a stuck or dead client from pinning memory forever.
//
// Forms: a committed chunk is stored plain (the bytes its writer committed) or encoded (a codec's
// frame, StoredEncoding, put in place by ReplaceForm: Compress). Engines read plain chunks only:
// Acquire, AcquirePrefix and AcquireForCopy find an encoded chunk only when asked for Forms::kAny
// (what decodes it: storage/tiered/host_forms.h) or for its codec by a load whose reader decodes
// it (Forms::DecodedByReader: a connector that decodes on the engine's device), so no engine or
// copy ever reads a frame as KV.
// Lookup and Contains find both forms (the chunk is cached either way).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "core/clock.h"
#include "core/kv_layout.h"
#include "core/stored_encoding.h"
#include "storage/host/chunk_observer.h"
#include "storage/host/eviction_listener.h"
#include "storage/host/page_allocator.h"
#include "storage/host/payload_view.h"
#include "storage/host/shared_arena.h"
#include "storage/policy/eviction_policy.h"

namespace strata::storage {

namespace internal_host {
struct ChunkRecord;
struct IndexShard;
class TenantTable;
}  // namespace internal_host

class HostTier;

struct HostTierOptions {
  // Arena size; a multiple of page_bytes.
  uint64_t capacity_bytes = 0;
  // Allocation unit; a multiple of 64. Chunks occupy whole pages.
  uint32_t page_bytes = 2u << 20;
  // Back the arena with huge pages (see SharedArenaOptions::use_hugepages).
  bool use_hugepages = false;
  // Allocate the arena's memory at Create (see SharedArenaOptions::prefault).
  bool prefault = false;
  std::string arena_name = "strata-host";
  // Sum of the sizes of hard-pinned chunks may not exceed this.
  uint64_t hard_pin_quota_bytes = 0;
  // Lease duration when Acquire is not given one.
  std::chrono::nanoseconds default_lease = std::chrono::seconds(30);
  // 1: verify the checksum on every load. N > 1: on the first load of each chunk and every N-th
  // load after it (a per-chunk counter, so deterministic); unverified loads may serve corrupted
  // bytes, which is the trade this setting makes.
  uint32_t verify_every_n_loads = 1;
  // Eviction policy name (storage/policy/eviction_policy.h).
  std::string policy = std::string(kDefaultEvictionPolicy);
  // The bytes each named tenant may keep in the tier (a tenant is ReserveOptions::tenant_name; see
  // TenantQuotaPolicy): tenant -> bytes, each in (0, capacity_bytes]. Every other tenant, and
  // chunks stored under none, share the tier bounded only by its capacity. Empty for none.
  std::map<std::string, uint64_t> tenant_quotas;
  // Time source of lease deadlines and pin TTLs; not owned; must outlive the tier.
  Clock* clock = SystemClock::Get();
  // Told about every eviction; nullable; not owned; must outlive the tier.
  EvictionListener* listener = nullptr;
  // Told about every chunk entering and leaving the index; nullable; not owned; must outlive
  // the tier.
  ChunkObserver* observer = nullptr;
};

struct ReserveOptions {
  // Tokens the chunk holds: 1..layout.chunk_tokens (fewer for a partial last chunk).
  uint32_t num_tokens = 0;
  // The previous chunk of the prefix chain, when there is one: a hint for the eviction policy.
  ChunkKey parent;
  // The last, partial chunk of a prompt (a hint for the eviction policy).
  bool partial = false;
  // A promotion from a lower tier that a reader asked for (PolicyChunkInfo::reused; a hint for
  // the eviction policy).
  bool reused = false;
  // The tenant that stores the chunk (an engine request's tenant salt, "" for none), recorded
  // with the chunk for ListChunksOptions::tenant and accounted to its quota when
  // HostTierOptions::tenant_quotas names it; nullopt records none. At most 65535 tenants have
  // chunks at once: beyond that Reserve answers kResourceExhausted for a chunk of a new tenant.
  std::optional<std::string_view> tenant_name;
  // The chunk's tokens, for ChunkObserver::OnStored (KV events); empty when not tracked. Kept
  // with the reservation until Commit.
  std::span<const uint32_t> token_ids;
  // The session that writes the chunk: AbortOwner(owner) aborts its open reservations. Callers
  // that track sessions should use non-zero ids (0 is every untracked caller).
  uint64_t owner = 0;
};

// Write access to the pages of one reserved, uncommitted chunk. Move-only. Destroying a valid
// reservation aborts it. Default-constructed and moved-from reservations are empty (!valid()).
class WriteReservation {
 public:
  WriteReservation() = default;
  WriteReservation(WriteReservation&& other) noexcept;
  WriteReservation& operator=(WriteReservation&& other) noexcept;
  WriteReservation(const WriteReservation&) = delete;
  WriteReservation& operator=(const WriteReservation&) = delete;
  ~WriteReservation();

  bool valid() const { return tier_ != nullptr; }
  const ChunkKey& key() const { return key_; }
  uint64_t size_bytes() const { return size_bytes_; }
  uint32_t num_tokens() const { return num_tokens_; }
  uint64_t owner() const { return owner_; }
  // Where the payload goes: arena offsets (what an engine that maps the arena is told).
  std::span<const ArenaRange> ranges() const { return ranges_; }
  // The payload's pages in this process.
  MutablePayloadView payload() const { return {base_, ranges_, size_bytes_}; }

 private:
  friend class HostTier;
  void Reset();

  HostTier* tier_ = nullptr;
  uint64_t handle_ = 0;
  ChunkKey key_;
  uint64_t size_bytes_ = 0;
  uint32_t num_tokens_ = 0;
  uint64_t owner_ = 0;
  std::byte* base_ = nullptr;
  ArenaRangeList ranges_;
};

enum class ReserveOutcome {
  kReserved,        // `reservation` is valid: fill it, then Commit or Abort
  kAlreadyPresent,  // the chunk is committed already: skip the copy
  kInProgress,      // another writer holds a reservation for the key
};

struct ReserveResult {
  ReserveOutcome outcome = ReserveOutcome::kReserved;
  WriteReservation reservation;  // valid only for kReserved
};

// Which forms of a chunk an Acquire call leases (see Forms above). A plain value.
struct Forms {
  // Encoded chunks leased too: those whose frame's codec (StoredEncoding::codec) is in the set.
  // An encoded chunk of another codec is left alone as if absent (no miss counted).
  CodecSet encoded_codecs;
  // Acquire: a lease of an encoded chunk is a load (a hit counted, the policy told, checksums
  // verified per verify_every_n_loads), because its reader decodes the frame itself. false: a
  // decoder's lease, which is no load until the chunk is plain; nor, then, is a plain chunk's.
  bool reader_decodes = false;

  static const Forms kPlainOnly;  // plain chunks only
  static const Forms kAny;  // plain or encoded, for a decoder: it reads ChunkLease::encoding()
  // A load whose reader decodes the frames of `codecs` itself.
  static constexpr Forms DecodedByReader(CodecSet codecs) {
    return {.encoded_codecs = codecs, .reader_decodes = true};
  }
  constexpr bool Leases(uint16_t codec) const { return encoded_codecs.Contains(codec); }
  // Whether a load's lease under these forms counts as one.
  constexpr bool CountsLoads() const { return encoded_codecs.empty() || reader_decodes; }
};
inline constexpr Forms Forms::kPlainOnly{};
inline constexpr Forms Forms::kAny{.encoded_codecs = CodecSet::All()};

// Read access to one committed chunk until deadline() (see the lease contract above).
// Move-only; destroying it (or Release) releases the lease.
class ChunkLease {
 public:
  ChunkLease(ChunkLease&& other) noexcept;
  ChunkLease& operator=(ChunkLease&& other) noexcept;
  ChunkLease(const ChunkLease&) = delete;
  ChunkLease& operator=(const ChunkLease&) = delete;
  ~ChunkLease();

  // False once released (or moved from). A lease released by ReleaseOwner stays valid() but no
  // longer protects anything: its owner is dead and must not read.
  bool valid() const { return tier_ != nullptr; }
  const ChunkKey& key() const { return key_; }
  uint64_t size_bytes() const { return size_bytes_; }
  uint32_t num_tokens() const { return num_tokens_; }
  // xxh3-64 of the payload, computed at commit (or at ReplaceForm).
  uint64_t checksum() const { return checksum_; }
  // The payload's form: encoded() for a frame (only leases whose Forms lease its codec).
  const StoredEncoding& encoding() const { return encoding_; }
  uint64_t owner() const { return owner_; }
  MonoTime deadline() const { return deadline_; }
  // True once the deadline has passed on the tier's clock.
  bool expired() const { return clock_->Now() >= deadline_; }
  std::span<const ArenaRange> ranges() const { return ranges_; }
  PayloadView payload() const { return {base_, ranges_, size_bytes_}; }
  // Releases the lease now; the handle becomes empty.
  void Release();

 private:
  friend class HostTier;
  ChunkLease() = default;

  HostTier* tier_ = nullptr;
  const Clock* clock_ = nullptr;
  uint64_t handle_ = 0;
  ChunkKey key_;
  uint64_t size_bytes_ = 0;
  uint64_t checksum_ = 0;
  StoredEncoding encoding_;
  uint32_t num_tokens_ = 0;
  uint64_t owner_ = 0;
  MonoTime deadline_{0};
  const std::byte* base_ = nullptr;
  ArenaRangeList ranges_;
};

struct PrefixLeases {
  // Leases of the leading chunks of the chain, in chain order.
  std::vector<ChunkLease> leases;
  // 1 when the run stopped at a chunk whose checksum failed (that chunk was dropped), else 0.
  uint32_t data_loss_chunks = 0;
};

enum class PinKind {
  kHard,  // never evicted until unpinned; counted against hard_pin_quota_bytes
  kSoft,  // not evicted until its TTL passes
};

struct PinOptions {
  PinKind kind = PinKind::kHard;
  std::chrono::nanoseconds ttl{0};  // kSoft only; > 0
};

// What a batch Pin / Unpin did. Keys that are not committed here are counted, not errors.
struct PinResult {
  uint64_t chunks = 0;   // committed chunks the call applied to
  uint64_t bytes = 0;    // their payload bytes
  uint64_t missing = 0;  // keys with no committed chunk
};

// One committed chunk as ListChunks reports it.
struct ChunkInfo {
  ChunkKey key;
  uint64_t size_bytes = 0;  // as stored: an encoded chunk's frame (encoding.decoded_bytes decoded)
  StoredEncoding encoding;
  uint32_t num_tokens = 0;
  bool hard_pinned = false;
  MonoTime soft_pin_deadline{0};  // 0 when not soft-pinned (may lie in the past)
  uint32_t leases = 0;            // unreleased lease handles, expired ones included
};

struct ListChunksOptions {
  // Resume after this cursor: 0 starts at the beginning; otherwise a ChunkPage::next_cursor.
  uint64_t cursor = 0;
  // At most this many chunks in the page.
  size_t limit = 1000;
  // Only chunks whose key carries this layout fingerprint, when set.
  std::optional<uint64_t> layout_fingerprint;
  // Only chunks stored with this ReserveOptions::tenant_name, when set (a tenant with no chunk
  // here gives an empty, complete listing).
  std::optional<std::string> tenant;
  // At most this many indexed chunks are examined per call, so a selective filter cannot hold
  // the tier lock for a whole-index scan; the page may then hold fewer than `limit` chunks.
  size_t max_scan = 65536;
};

struct ChunkPage {
  std::vector<ChunkInfo> chunks;  // in commit order
  uint64_t next_cursor = 0;       // 0: the listing is complete
};

struct RemoveResult {
  uint64_t chunks = 0;
  uint64_t bytes = 0;  // payload bytes
};

// A consistent snapshot of the tier's accounting. Byte counts are exact: *_bytes of chunks are
// payload sizes; used/free count whole pages.
struct HostTierStats {
  uint64_t capacity_bytes = 0;
  uint64_t page_bytes = 0;
  uint64_t used_bytes = 0;      // pages held by committed, reserved and not-yet-freed chunks
  uint64_t free_bytes = 0;      // capacity_bytes - used_bytes
  uint64_t payload_bytes = 0;   // sum of committed chunk sizes
  uint64_t reserved_bytes = 0;  // sum of open reservation sizes
  // Payload bytes of chunks that left the index but whose pages are still read by a lease or
  // being handed to the eviction listener.
  uint64_t pending_free_bytes = 0;
  uint64_t chunks = 0;  // committed chunks in the index
  uint64_t reservations = 0;
  uint64_t hard_pinned_bytes = 0;
  uint64_t soft_pinned_bytes = 0;  // chunks whose soft pin has not expired
  uint64_t leased_bytes = 0;       // committed chunks under an unexpired lease
  uint64_t active_leases = 0;      // lease handles not yet released (expired ones included)
  // Chunks leased by Acquire / AcquirePrefix; a failed checksum turns its hit into a miss.
  uint64_t hits = 0;
  // Acquire / AcquirePrefix stops at an absent chunk or a failed checksum (Lookup counts none).
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t checksum_failures = 0;  // chunks dropped for a checksum mismatch
  uint64_t removed = 0;            // chunks removed by Remove / RemoveIf / RemoveAll
  uint64_t removed_bytes = 0;
  uint64_t commits = 0;  // chunks committed so far (stores)
  uint64_t committed_bytes = 0;
  uint64_t hit_bytes = 0;  // payload bytes of the hits (loads)
  // Committed chunks stored encoded (ReplaceForm), their stored bytes (counted in payload_bytes)
  // and the bytes they decode to.
  uint64_t encoded_chunks = 0;
  uint64_t encoded_bytes = 0;
  uint64_t encoded_decoded_bytes = 0;
};

class HostTier {
 public:
  // Creates the arena and an empty tier. kInvalidArgument for unusable options (zero capacity, a
  // capacity that is not a multiple of page_bytes, more than 2^32 pages, a zero lease, zero
  // verify_every_n_loads, an unknown policy, tenant quotas CheckTenantQuotas refuses); arena
  // errors as SharedArena::Create reports them.
  static absl::StatusOr<std::unique_ptr<HostTier>> Create(const HostTierOptions& options);
  // OK when each of `quotas` (HostTierOptions::tenant_quotas) names a tenant and lies in
  // (0, capacity_bytes]; else kInvalidArgument naming the first, by name, that does not. Create
  // checks it; a config loader may, before making anything.
  static absl::Status CheckTenantQuotas(const std::map<std::string, uint64_t>& quotas,
                                        uint64_t capacity_bytes);

  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;
  // Every WriteReservation and ChunkLease must be gone (STRATA_CHECK).
  ~HostTier();

  // Reserves pages for chunk `key` of layout.chunk_bytes(options.num_tokens) bytes, evicting
  // through the policy when free pages are short (with a listener, this may wait while evicted
  // chunks are handed to it). The chunk is invisible until Commit.
  // kInvalidArgument: invalid layout, empty key, key of another layout, num_tokens of 0 or above
  // layout.chunk_tokens, a chunk larger than the tier. kResourceExhausted when not enough can be
  // freed (the message says how much is pinned, leased and reserved). A committed or reserved
  // key is a result (kAlreadyPresent / kInProgress), not an error.
  absl::StatusOr<ReserveResult> Reserve(const KvLayout& layout, const ChunkKey& key,
                                        const ReserveOptions& options);
  // Reserve for a chunk of `size_bytes` without its layout: for promotions of a chunk whose size
  // and token count a lower tier recorded when the chunk was stored (checked against its layout
  // then), when the promoter knows no layout (a peer asking for a chunk held only on disk).
  // kInvalidArgument: empty key, size or num_tokens of 0, a chunk larger than the tier; else as
  // Reserve.
  absl::StatusOr<ReserveResult> ReserveSized(const ChunkKey& key, uint64_t size_bytes,
                                             const ReserveOptions& options);

  // Publishes the chunk: visible to lookups, tracked by the policy. Its checksum is
  // `writer_checksum` when the writer digested the payload as it wrote it, else the tier's own
  // xxh3-64 of the payload (a wrong writer checksum makes every verified load of the chunk fail,
  // never pass). The reservation is consumed whatever the outcome. kInvalidArgument for an empty
  // reservation or one of another tier; kAborted when it was aborted by AbortOwner.
  absl::Status Commit(WriteReservation&& reservation,
                      std::optional<uint64_t> writer_checksum = std::nullopt);
  // Frees the reservation's pages; the key becomes reservable again. Empty: no-op.
  void Abort(WriteReservation&& reservation);
  // Aborts every open reservation of `owner` (a session that died: its writers must never
  // touch their pages again). Their WriteReservation objects become inert (Commit on them gives
  // kAborted). Returns how many were aborted.
  size_t AbortOwner(uint64_t owner);
  // Releases every lease of `owner` (a session that died: its readers must not read again).
  // Their ChunkLease objects become inert. Returns how many were released.
  size_t ReleaseOwner(uint64_t owner);

  // Number of leading keys of `chain` that are committed here; stops at the first miss (an
  // empty key is a miss). No lease, no checksum, no effect on the policy or hit counters. Not a
  // snapshot: chunks may come and go while it runs, so a later Acquire may still miss.
  size_t Lookup(std::span<const ChunkKey> chain) const;
  bool Contains(const ChunkKey& key) const;
  // True when `key` is committed and stored encoded (ReplaceForm): plain Acquires miss it. As
  // cheap as Contains (a shard's reader lock).
  bool HoldsEncoded(const ChunkKey& key) const;

  // Leases a committed chunk for `lease_duration` (default_lease when nullopt) on behalf of
  // `owner`, verifying its checksum per verify_every_n_loads unless `reader_verifies` (the
  // reader checks the lease's checksum() against the bytes it copies). nullopt on a miss. kDataLoss
  // on a checksum mismatch: the chunk is dropped from the index (counted) and its pages are freed
  // once no other lease reads them. kInvalidArgument for an empty key or a non-positive
  // duration. kAborted when the lease expired while its checksum was being verified. An encoded
  // chunk is a miss unless `forms` leases its codec: then uncounted, like a copy (it is no load
  // yet), unless its reader decodes it (Forms::reader_decodes).
  absl::StatusOr<std::optional<ChunkLease>> Acquire(
      const ChunkKey& key, std::optional<std::chrono::nanoseconds> lease_duration = std::nullopt,
      uint64_t owner = 0, bool reader_verifies = false, Forms forms = Forms::kPlainOnly);
  // Leases a committed chunk for a copy the daemon makes of it (to the disk tier: write-through,
  // Move, Drain), which is not a load: no hit or miss is counted, the eviction policy and the
  // verify_every_n_loads counter are untouched and no checksum is verified (the copy carries
  // lease.checksum(), which its reader checks). nullopt on a miss (and for an encoded chunk
  // unless `forms` is kAny). kInvalidArgument for an empty key or a non-positive duration.
  absl::StatusOr<std::optional<ChunkLease>> AcquireForCopy(
      const ChunkKey& key, std::optional<std::chrono::nanoseconds> lease_duration = std::nullopt,
      Forms forms = Forms::kPlainOnly);
  // Leases the longest leading run of `chain` that is committed plain and verifies, in one pass
  // under the tier lock (then verification without it). Stops at the first miss or checksum failure
  // (dropping that chunk, data_loss_chunks = 1), or at a lease that expired while it was being
  // verified. kInvalidArgument for an empty key anywhere in `chain` or a non-positive duration.
  absl::StatusOr<PrefixLeases> AcquirePrefix(
      std::span<const ChunkKey> chain,
      std::optional<std::chrono::nanoseconds> lease_duration = std::nullopt, uint64_t owner = 0);

  // Writes a new form of a chunk into `pages` (exactly its size); its error fails ReplaceForm.
  using FormWriter = absl::FunctionRef<absl::Status(const MutablePayloadView& pages)>;
  // Stores the chunk `lease` reads in another form, in place: `size_bytes` that `write` puts
  // into fresh pages, whose xxh3-64 is `checksum`, in the form `encoding` (an encoded frame, or a
  // plain chunk with a default StoredEncoding). The pages are found as Reserve finds them (this
  // may evict other chunks) and written with no lock held (`write` may read the chunk through
  // `lease`: its pages stay until the swap); then, under the tier lock, the chunk takes them and
  // its old pages are freed. It keeps its key, tokens, tenant, pins and commit order, and the
  // policy sees it reinserted at its new size as a reused chunk (tenant quotas count stored
  // bytes). The observer is not told: the chunk never left. On success `lease` reads the new
  // form. `lease` must be the chunk's only lease, so no reader sees the swap. kUnavailable:
  // another lease reads the chunk (retry later); kAborted: the chunk was removed or evicted, or
  // the lease was released or has expired; kResourceExhausted: no room for the new form, or a
  // hard pin whose new size would exceed the quota; kInvalidArgument: an empty lease or one of
  // another tier, a size of 0 or larger than the tier; `write`'s error (nothing changed).
  absl::Status ReplaceForm(ChunkLease& lease, uint64_t size_bytes, uint64_t checksum,
                           const StoredEncoding& encoding, FormWriter write);
  // ReplaceForm of a copy of `payload` (not the chunk's own pages), its checksum computed here.
  // The copy goes into free pages with no lock held, as above, when free pages can hold it. When
  // they cannot but the chunk's own can (a full tier, a form that shrinks), it goes into pages of
  // the chunk's own under the tier lock (no reader can lease it meanwhile: a memcpy of the
  // payload held there), so a form that shrinks never evicts another chunk; otherwise as above.
  absl::Status ReplaceForm(ChunkLease& lease, std::span<const std::byte> payload,
                           const StoredEncoding& encoding);

  // What ReplaceForm would answer now before it writes anything (kUnavailable, kAborted,
  // kInvalidArgument for the lease as above), for a caller that would otherwise encode a chunk
  // only to learn it is busy. A hint: ReplaceForm checks again under the lock.
  absl::Status CheckReplaceable(const ChunkLease& lease) const;

  // Pins a committed chunk. Hard pins are idempotent and count the chunk's size against the
  // quota (kResourceExhausted beyond it); a soft pin protects until now + ttl (re-pinning
  // extends it). kInvalidArgument for an empty, unknown or uncommitted key, or a soft pin
  // without a positive ttl. Pins protect from eviction only; Remove still removes.
  absl::Status Pin(const ChunkKey& key, const PinOptions& options);
  // Pins every committed chunk of `keys`, all or nothing: kResourceExhausted (nothing pinned)
  // when the hard pins would exceed the quota. Keys without a committed chunk are counted in
  // PinResult::missing. kInvalidArgument for an empty key or a soft pin without a positive ttl.
  absl::StatusOr<PinResult> PinChunks(std::span<const ChunkKey> keys, const PinOptions& options);
  // Removes the hard pin or the soft pin of a chunk (no-op if it has none).
  // kInvalidArgument for an empty, unknown or uncommitted key.
  absl::Status Unpin(const ChunkKey& key, PinKind kind);
  // Unpins every committed chunk of `keys` (missing ones counted). kInvalidArgument for an
  // empty key (nothing unpinned).
  absl::StatusOr<PinResult> UnpinChunks(std::span<const ChunkKey> keys, PinKind kind);

  // Removes a committed chunk (pinned or not): it leaves the index at once, its pages are
  // freed when no unexpired lease reads them. Unknown or uncommitted keys remove nothing.
  // kInvalidArgument for an empty key.
  absl::StatusOr<RemoveResult> Remove(const ChunkKey& key);
  // Removes every committed chunk whose key satisfies `predicate`, shard by shard. The
  // predicate runs under the tier's locks: it must be quick and must not call the tier.
  RemoveResult RemoveIf(absl::FunctionRef<bool(const ChunkKey&)> predicate);
  // Removes every committed chunk at once (one pass under the tier lock) and tells the
  // observer OnCleared, not OnRemoved per chunk. Leased chunks' pages are freed as Remove says.
  RemoveResult RemoveAll();

  // Stops admitting new chunks: Reserve answers kFailedPrecondition from now on (commits of
  // open reservations still succeed). Irreversible; idempotent.
  void StopAdmitting();
  bool admitting() const;

  HostTierStats Stats() const;

  // A page of committed chunks in commit order, resumable by cursor: chunks committed after the
  // listing started appear on later pages, removed ones disappear, none is listed twice. Costs
  // O(log chunks + examined) under the tier lock; never copies the index.
  ChunkPage ListChunks(const ListChunksOptions& options) const;
  // The tenant a committed chunk was stored under (ReserveOptions::tenant_name); "" for a chunk
  // stored under none, and for a key with no committed chunk. Takes the tier lock.
  std::string TenantOf(const ChunkKey& key) const;

  // Walks every structure and checks that the pages of all chunks and the free runs tile the
  // arena exactly, and that every counter matches what it counts. kInternal naming the first
  // broken invariant. O(chunks): for tests and debugging.
  absl::Status CheckConsistency() const;

  // The shared arena, to be mapped by engines (pass arena_fd() with SCM_RIGHTS).
  int arena_fd() const { return arena_->fd(); }
  std::byte* arena_base() const { return arena_->base(); }
  uint64_t arena_size_bytes() const { return arena_->size_bytes(); }
  const PrefaultedRegion& arena_pages() const { return arena_->pages(); }
  uint32_t page_bytes() const { return options_.page_bytes; }
  const HostTierOptions& options() const { return options_; }

 private:
  friend class WriteReservation;
  friend class ChunkLease;
  using Record = internal_host::ChunkRecord;
  using Shard = internal_host::IndexShard;

  // A lease or a reservation, by handle id.
  struct Handle {
    Record* record = nullptr;
    uint64_t owner = 0;
    bool is_lease = false;
    bool partial = false;             // reservations: policy hint
    bool reused = false;              // reservations: policy hint
    uint32_t quota_id = 0;            // reservations: the tenant's quota id (0: none)
    ChunkKey parent;                  // reservations: policy hint
    std::vector<uint32_t> token_ids;  // reservations: for the observer
  };

  struct AcquireRun {
    std::vector<ChunkLease> leases;
    absl::Status failure;  // why the run stopped early, when it was not a miss
  };

  HostTier(const HostTierOptions& options, std::unique_ptr<SharedArena> arena,
           std::unique_ptr<EvictionPolicy> policy,
           absl::flat_hash_map<std::string, uint32_t> quota_ids);

  // Inline, in internal/host_tier_inline.h: functions in several files inline them.
  static inline size_t ShardIndex(const ChunkKey& key);
  inline Shard& ShardFor(const ChunkKey& key) const;
  inline uint32_t PagesFor(uint64_t size_bytes) const;
  inline void MaybeDestroyLocked(Record* record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The quota id a chunk of `tenant` is accounted under: 0 for none, or a tenant with no quota.
  uint32_t QuotaIdOf(std::optional<std::string_view> tenant) const;
  Record* FindLocked(const ChunkKey& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<ExtentList> AllocateLocked(uint32_t num_pages, uint64_t size_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SweepExpiredLocked(MonoTime now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReclaimDetachedLocked(MonoTime now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateProtectionLocked(Record* record, MonoTime now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a committed chunk out of the index (and the policy, unless kEvicted: the policy popped
  // it), telling the observer when `notify`.
  void DetachLocked(Record* record, RemovalCause cause, bool notify)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropLocked(Record* record, MonoTime now, RemovalCause cause, bool notify)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreePagesLocked(Record* record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(uint64_t handle_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseLeaseLocked(Record* record, MonoTime now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string ExhaustedMessageLocked(uint64_t size_bytes, uint32_t num_pages, MonoTime now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ArenaRangeList RangesFor(const Record& record) const;
  // The arena ranges of `size_bytes` laid over `extents`.
  ArenaRangeList RangesOf(const ExtentList& extents, uint64_t size_bytes) const;
  // How AcquireChain treats the leases it hands out.
  enum class LeaseUse {
    kLoad,            // an engine's load: counted, touches the policy, verified when due
    kLoadUnverified,  // the same, but the reader verifies what it copies
    kTierCopy,        // the daemon's own copy (AcquireForCopy): none of that
  };
  // Leases the committed run of `chain` for `use`.
  AcquireRun AcquireChain(std::span<const ChunkKey> chain, std::chrono::nanoseconds duration,
                          uint64_t owner, LeaseUse use = LeaseUse::kLoad,
                          Forms forms = Forms::kPlainOnly);
  // Acquire and AcquireForCopy: checks the arguments, then leases `key` for `use`.
  absl::StatusOr<std::optional<ChunkLease>> AcquireOne(
      const ChunkKey& key, std::optional<std::chrono::nanoseconds> lease_duration, uint64_t owner,
      LeaseUse use, Forms forms);
  // ReplaceForm's checks of its arguments.
  absl::Status CheckReplacement(const ChunkLease& lease, uint64_t size_bytes) const;
  // The record `lease` reads when ReplaceForm may swap its form (see its errors).
  absl::StatusOr<Record*> ReplaceableLocked(const ChunkLease& lease) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a committed chunk's form (encodings_ and its accounting); a plain one forgets it.
  void SetFormLocked(Record* record, const StoredEncoding& encoding)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK unless `record` is hard-pinned and `size_bytes` in its place would exceed the pin quota.
  absl::Status CheckPinQuotaLocked(const Record& record, uint64_t size_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fresh pages a ReplaceForm call writes with no lock held, held in replacing_ under `call`.
  struct Replacement {
    uint64_t call = 0;
    ExtentList extents;
  };
  // Pages for a new form of `size_bytes` (AllocateLocked's: this may evict, and may release mu_
  // meanwhile), held in replacing_ until FinishReplacement.
  absl::StatusOr<Replacement> BeginReplacementLocked(uint64_t size_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the new form into the replacement's pages with no lock held, then swaps it in
  // (SwapFormLocked) when the chunk may still take it, else frees the pages (ReplaceForm's
  // errors, or `write`'s).
  absl::Status FinishReplacement(ChunkLease& lease, Replacement replacement, uint64_t size_bytes,
                                 uint64_t checksum, const StoredEncoding& encoding,
                                 FormWriter write) ABSL_LOCKS_EXCLUDED(mu_);
  // ReplaceForm's swap: the chunk takes `extents` (holding the new form, `size_bytes` of it with
  // `checksum`) in place of its pages (freed, unless freed already), with `encoding`, and is
  // reinserted in the policy; `lease` (its only one) reads the new form.
  void SwapFormLocked(Record* record, ExtentList extents, uint64_t size_bytes, uint64_t checksum,
                      const StoredEncoding& encoding, ChunkLease& lease)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The form of a committed chunk; a default (plain) StoredEncoding when it has none.
  StoredEncoding FormOfLocked(const Record* record) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OnChecksumMismatch(ChunkLease& lease, uint64_t computed);

  // Called by the handles.
  void AbortHandle(uint64_t handle_id);
  void ReleaseLeaseHandle(uint64_t handle_id);

  const HostTierOptions options_;
  Clock* const clock_;
  EvictionListener* const listener_;
  ChunkObserver* const observer_;
  const std::unique_ptr<SharedArena> arena_;

  // Index shards: key -> record. Lookup and Contains hold one shard's reader lock; writers hold
  // mu_ and then the shard's writer lock (lock order: mu_ before any shard mutex; never two
  // shard mutexes at once).
  const std::unique_ptr<Shard[]> shards_;
  // The quota id of each tenant with a quota (options_.tenant_quotas; ids from 1 in the map's
  // order, what the policy partitions by). Immutable.
  const absl::flat_hash_map<std::string, uint32_t> quota_ids_;
  // Tenant names of the indexed chunks. Guarded by mu_ (the pointer is const).
  const std::unique_ptr<internal_host::TenantTable> tenants_ ABSL_PT_GUARDED_BY(mu_);

  // The tier lock: allocator, policy, handles, protection state and accounting.
  mutable absl::Mutex mu_;
  // Signalled when pages handed to the eviction listener are freed.
  absl::CondVar pages_freed_;
  PageAllocator allocator_ ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<EvictionPolicy> policy_ ABSL_PT_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Handle> handles_ ABSL_GUARDED_BY(mu_);
  uint64_t next_handle_ ABSL_GUARDED_BY(mu_) = 1;
  // Handle objects (reservations and leases) bound to this tier, released or not.
  uint64_t bound_handles_ ABSL_GUARDED_BY(mu_) = 0;
  // Committed chunks under a lease or soft pin, by the time that protection ends.
  std::set<std::pair<MonoTime, Record*>> expiry_ ABSL_GUARDED_BY(mu_);
  // Committed chunks by commit sequence number (ListChunks' order and cursor).
  absl::btree_map<uint64_t, Record*> by_seq_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  bool admitting_ ABSL_GUARDED_BY(mu_) = true;
  // Chunks out of the index that still hold pages (read by leases, or being evicted).
  absl::flat_hash_set<Record*> detached_ ABSL_GUARDED_BY(mu_);
  // The forms of the committed chunks stored encoded (Record::encoded), and their bytes stored
  // and decoded.
  absl::flat_hash_map<const Record*, StoredEncoding> encodings_ ABSL_GUARDED_BY(mu_);
  uint64_t encoded_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t encoded_decoded_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Pages ReplaceForm holds while it copies a new form into them, by call.
  absl::flat_hash_map<uint64_t, ExtentList> replacing_ ABSL_GUARDED_BY(mu_);

  uint64_t committed_pages_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unevictable_pages_ ABSL_GUARDED_BY(mu_) = 0;  // of committed chunks
  uint64_t evicting_pages_ ABSL_GUARDED_BY(mu_) = 0;     // with the listener right now
  uint64_t chunks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t payload_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reservations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t reserved_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hard_pinned_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t active_leases_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evicted_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t checksum_failures_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t removed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t removed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t commits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t committed_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hit_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace strata::storage
