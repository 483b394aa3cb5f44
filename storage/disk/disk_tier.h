// DiskTier holds chunks of KV on local disk (tier T2 of DESIGN.md section 4): an append-only log
// of segment files written with O_DIRECT through an IoEngine, and a RocksDB DiskIndex beside it.
// It survives restarts: Open reconciles the index with the segments.
//
// Write ordering (what makes "nothing half-written is ever served" hold):
//   1. Put reserves the record's place at the end of the active segment (under the lock);
//   2. header block and padded payload are written (no lock held);
//   3. fdatasync(segment): the payload is durable;
//   4. the index entry and the watermark are written to RocksDB in one batch, and the chunk
//      becomes visible to Lookup / Read (under the lock, so index order = memory order).
// A chunk is therefore never indexed before its bytes are durable. The watermark is the lowest
// log position whose record is still between steps 1 and 4 (or the end of the log): every
// record before it is accounted for by the index, live or dead.
//
// Group commit: steps 3 and 4 are shared. A record whose payload is written joins a commit
// queue; one writer at a time (the leader, any Put / PutBatch caller with records queued) takes
// the whole queue, fdatasyncs each segment it touches once (no lock held), then ends every
// record's reservation and writes all their index entries with one watermark in one RocksDB
// batch. Records written while a leader syncs wait for the next group, so concurrent writers
// overlap their payload writes with each other's syncs. PutBatch writes all its records with one
// queue of requests before they join the commit queue together.
//
// Start-up reconciliation (Open): index entries that name a missing segment or run past its end
// are dropped. Records from the watermark onward that the index does not name are checked
// (header checksum, then payload checksum): valid ones are re-indexed (their Put may have died
// between steps 3 and 4), invalid ones are dead space; a torn tail after the last indexed
// record of a segment is truncated away. Index entries are not re-read at start-up (that would
// read the whole disk): every Read verifies the payload checksum, so a corrupt record is caught
// on its first read, reported as kDataLoss, counted and dropped. Known gap: a chunk removed after
// the last watermark write and before a crash can come back (its bytes are valid for its key).
// fsync points: the directory after a segment file is created, fdatasync of the segment per
// record (step 3), RocksDB's WAL per write when `sync_index_writes`, DiskIndex::Sync at the end
// of Open and before a compacted segment's file is unlinked.
//
// Space: the segment files and the index's files together keep within `capacity_bytes` of disk
// blocks, give or take the index's growth since it was last measured. Its share is measured
// (DiskIndex::FileBytes) at Open and by every group commit's leader; between two measurements it
// grows by the entries written since (~100 bytes each), or by one table of at most RocksDB's
// 8 MiB memtable while a flush replaces a WAL. The active segment is preallocated whole, so
// appends allocate nothing; a sealed one gives back its blocks past its last record. Records of
// Puts keep within capacity_bytes - 2 * segment_bytes - the index's share, which leaves room for
// the active segment's preallocation and for compaction, which copies only while records,
// preallocation and index stay within capacity_bytes. A Put that needs space evicts chunks
// chosen by the EvictionPolicy, deletes segments with no live record and, when dead records
// still take the space, compacts the sealed segment with the fewest live bytes (copies its live
// records forward and deletes it), or evicts its chunks when that cannot be done. When that
// segment is mostly live and live data takes more than 4/5 of the limit, the policy's next
// victims go first (copying would write more than it frees), until a segment empties or turns
// cheap to copy: a full tier copies at most 4 bytes per byte it frees, usually far less. Compact()
// does the same to every mostly-dead segment. Reads go on throughout: a reader holds a reference to
// its segment's file, which stays readable until the last reference is gone.
//
// Failures: an I/O error, short read or checksum mismatch on Read makes that chunk kDataLoss;
// it is counted and dropped (the engine recomputes). A Put that finds no space (capacity, or
// ENOSPC from the file system) fails with kResourceExhausted, and reads go on.
//
// Thread-safety: every method is thread-safe. One mutex (mu_) guards the in-memory index,
// segments, policy and counters; payload I/O and fdatasync never run under it. RocksDB writes
// (unsynced WAL appends by default) do run under it, so the durable index order equals the
// in-memory one. IoEngines come from an IoEnginePool (its lock is never held with mu_): each
// engine serves one thread at a time, as io_engine.h requires.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "storage/disk/disk_index.h"
#include "storage/disk/record_format.h"
#include "storage/disk/record_io.h"
#include "storage/disk/segment_file.h"
#include "storage/host/chunk_observer.h"
#include "storage/io/io_engine.h"
#include "storage/io/io_engine_pool.h"
#include "storage/policy/eviction_policy.h"

namespace strata::storage {

struct DiskTierOptions {
  // Holds segment-*.log and index/; created when missing.
  std::string directory;
  // Most bytes of disk blocks the segment files may take; at least 3 * segment_bytes.
  uint64_t capacity_bytes = 0;
  // Size at which the active segment is sealed and a new one started; a multiple of 4 KiB. A
  // record must fit in one segment.
  uint64_t segment_bytes = 256ull << 20;
  // EvictionPolicy name (storage/policy).
  std::string eviction_policy = "lru";
  // Engines for the pool; ignored when make_engine is set.
  IoEngineOptions io;
  // Makes the pool's engines (tests wrap engines in FaultInjectingIoEngine). Optional.
  std::function<absl::StatusOr<std::unique_ptr<IoEngine>>()> make_engine;
  // Largest single I/O request; a multiple of 4 KiB.
  uint32_t max_io_bytes = 2u << 20;
  // fsync RocksDB's WAL on every index write (DiskIndex).
  bool sync_index_writes = false;
  // Told about every chunk that becomes visible (Put, with no parent or tokens) or leaves the
  // index (Remove and RemoveIf: kRemoved, one call per chunk, never OnCleared; eviction:
  // kEvicted; a failed checksum or read: kCorrupt), under the tier's lock. Chunks found at Open
  // and records moved by compaction are not reported. Nullable; not owned; must outlive the tier.
  ChunkObserver* observer = nullptr;
};

// One chunk for DiskTier::PutBatch; Put's arguments. The payload's memory is the caller's.
struct DiskPut {
  ChunkKey key;
  uint64_t layout_fingerprint = 0;
  ConstParts payload;  // what is stored: the chunk, or its encoded frame
  uint64_t payload_checksum = 0;
  uint32_t num_tokens = 0;
  // How the payload relates to the chunk (kept in the record and the index, reported by Lookup
  // and List; the tier itself never encodes or decodes).
  StoredEncoding encoding;
  // The tenant that stored the chunk ("" for none), kept in the record and the index for
  // List's tenant filter. One longer than kMaxRecordTenantBytes is not kept (the chunk is
  // stored as no tenant's). The caller's memory, like the payload's.
  std::string_view tenant;
};

// What Lookup reports about a chunk on disk.
struct DiskChunkInfo {
  uint64_t payload_bytes = 0;  // stored: what Read fills
  uint64_t payload_checksum = 0;
  uint64_t layout_fingerprint = 0;
  uint32_t num_tokens = 0;
  StoredEncoding encoding;
  std::string tenant;  // DiskPut::tenant as kept

  friend bool operator==(const DiskChunkInfo&, const DiskChunkInfo&) = default;
};

// Which chunks DiskTier::List reports, and from where.
struct DiskListOptions {
  // Resume after this key (a DiskChunkPage's resume_after); nullopt: from the first chunk.
  std::optional<ChunkKey> after;
  // Index entries examined: a page holds at most this many chunks (fewer when some are filtered
  // out or were removed meanwhile). At least 1.
  uint32_t limit = 100;
  uint64_t layout_fingerprint = 0;  // 0: every layout
  // Only the chunks this tenant stored (DiskPut::tenant; "" is no tenant's); nullopt: every one.
  std::optional<std::string> tenant;
};

struct DiskChunkPage {
  std::vector<std::pair<ChunkKey, DiskChunkInfo>> chunks;  // in key order
  std::optional<ChunkKey> resume_after;                    // nullopt: the listing is complete
};

struct DiskTierStats {
  uint64_t capacity_bytes = 0;
  uint64_t disk_bytes = 0;     // blocks of the segment files: records, dead or alive, and the
                               // active segment's preallocation
  uint64_t index_bytes = 0;    // blocks of the index's files, as last measured (see Space)
  uint64_t live_bytes = 0;     // records (header + padded payload) of resident chunks
  uint64_t payload_bytes = 0;  // payloads of resident chunks, as stored
  uint64_t decoded_bytes = 0;  // the same chunks decoded (payload_bytes when none is encoded)
  uint64_t encoded_chunks = 0;
  uint64_t chunks = 0;
  uint64_t segments = 0;
  uint64_t reads = 0;   // successful
  uint64_t writes = 0;  // successful Puts
  uint64_t read_bytes = 0;
  uint64_t written_bytes = 0;
  // Successful reads and writes whose buffers were not aligned for in-place transfer, so the
  // payload was copied through a staging buffer.
  uint64_t staged_reads = 0;
  uint64_t staged_writes = 0;
  uint64_t io_errors = 0;  // failed reads, writes and syncs
  uint64_t checksum_failures = 0;
  uint64_t evictions = 0;
  uint64_t compacted_segments = 0;
  uint64_t compacted_bytes = 0;    // records copied forward by compaction
  uint64_t recovered_records = 0;  // re-indexed at Open
  uint64_t dropped_records = 0;    // index entries dropped at Open, or torn / corrupt on read

  // What the tier takes of its capacity: segment files and index.
  uint64_t used_bytes() const { return disk_bytes + index_bytes; }
};

class DiskTier {
 public:
  // Opens the tier in options.directory, reconciling the index with the segments (see above).
  // kInvalidArgument for bad options; kFailedPrecondition when the directory's file system
  // refuses O_DIRECT; I/O and RocksDB errors as they come.
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Stores `payload` (the concatenation of the parts; aligned parts are written without a copy,
  // see record_io.h) under `key`. `payload_checksum` is the payload's xxh3-64 as the caller
  // computed it; it is not re-verified, and a wrong one makes every Read of the chunk kDataLoss.
  // OK once the chunk is durable and visible; OK at once when `key` is already stored or being
  // stored. kResourceExhausted when no space can be made; kInvalidArgument when the record does
  // not fit in a segment; kUnavailable on other I/O or index errors. The caller keeps the
  // payload's memory; the tier does not hold on to it after returning.
  absl::Status Put(const ChunkKey& key, uint64_t layout_fingerprint, ConstParts payload,
                   uint64_t payload_checksum, uint32_t num_tokens);
  absl::Status Put(const ChunkKey& key, uint64_t layout_fingerprint,
                   std::span<const std::byte> payload, uint64_t payload_checksum,
                   uint32_t num_tokens);

  // Stores several chunks as Put does each, returning one status per chunk (same codes). Their
  // records are reserved together (when the space for all of them cannot be made at once, the
  // ones reserved are stored first and the rest retried), written with one queue of requests,
  // and committed with one fdatasync per segment and one index batch. Staged (unaligned)
  // payloads are all copied before the writes start: a caller bounds the batch's bytes.
  std::vector<absl::Status> PutBatch(std::span<const DiskPut> puts);

  // The chunk's description, or nullopt when it is not on disk (a miss is not an error).
  std::optional<DiskChunkInfo> Lookup(const ChunkKey& key) const;
  // Whether the chunk is on disk, without describing it (engines' lookups ask this per key).
  bool Contains(const ChunkKey& key) const;

  // Keeps `layout` with the index (DiskIndex::PutLayout) unless it is kept already, so that the
  // chunks encoded for it can be decoded after a restart: call it before storing the first.
  // The index's errors.
  absl::Status KeepLayout(const KvLayout& layout);
  // A layout kept by KeepLayout, in this run or an earlier one; null when none has `fingerprint`.
  std::shared_ptr<const KvLayout> KeptLayout(uint64_t fingerprint) const;

  // One page of the chunks on disk, in the index's key order: paging from nullopt until
  // resume_after is nullopt visits every chunk present throughout once; chunks stored or removed
  // meanwhile may or may not appear. Each chunk listed was visible to Lookup when its page was
  // made. kInvalidArgument for a zero limit; the index's errors.
  absl::StatusOr<DiskChunkPage> List(const DiskListOptions& options) const;

  // Reads the chunk's payload into `destination` (the parts' sizes must add up to its
  // payload_bytes, else kInvalidArgument) and verifies its checksum. Parts that start on a 4 KiB
  // boundary, all but the last a multiple of 4 KiB long (shared-arena pages), are filled by the
  // kernel directly, without a bounce copy. kAborted when the chunk is not on disk (removed or
  // evicted since Lookup: look up again); kDataLoss on an I/O error, short read or checksum
  // mismatch, after which the chunk is dropped. On failure the parts hold unspecified bytes.
  absl::Status Read(const ChunkKey& key, MutableParts destination);
  absl::Status Read(const ChunkKey& key, std::span<std::byte> destination);
  // Reads several chunks as Read does each (destinations[i] for keys[i]), returning one status
  // per chunk with Read's codes. Their requests are queued together, so the device does not
  // idle between chunks. kInvalidArgument for every chunk when the spans' sizes differ.
  std::vector<absl::Status> ReadBatch(std::span<const ChunkKey> keys,
                                      std::span<const MutableParts> destinations);

  // Drops the chunk; false when it was not on disk. A Put of the same key in flight is not
  // affected. Errors only from the index.
  absl::StatusOr<bool> Remove(const ChunkKey& key);
  // Drops the chunk as corrupt if it is still what `expected` describes: its reader found the
  // bytes unusable although they passed their checksum (an encoded frame that does not decode).
  // Counted in dropped_records and told to the observer as kCorrupt. false when the chunk is
  // gone or was replaced meanwhile. Errors only from the index.
  absl::StatusOr<bool> DropCorrupt(const ChunkKey& key, const DiskChunkInfo& expected);

  // Drops every chunk whose key satisfies `predicate`, which runs under the tier's lock (quick;
  // must not call the tier). Returns the chunks and payload bytes dropped. Errors only from the
  // index, after which some matching chunks may remain.
  struct RemovedChunks {
    uint64_t chunks = 0;
    uint64_t payload_bytes = 0;
  };
  absl::StatusOr<RemovedChunks> RemoveIf(absl::FunctionRef<bool(const ChunkKey&)> predicate);

  // Replaces the record of `put.key` with `put`, another stored form of the same chunk (encoded
  // by a codec, or decoded: the caller's choice, DiskPut::encoding says which), if the chunk is
  // still described by `expected` (Lookup's answer). The new record is written and synced like a
  // Put's; then, under the tier's lock, the index entry is swapped when the chunk is unchanged,
  // so a reader gets the old record or the new one, never a mix (a read already under way keeps
  // reading the old one; its segment stays readable). True when swapped; false when the chunk
  // was removed or replaced meanwhile (the new record is dead space). A crash before the swap
  // leaves the old form (Open keeps an indexed key's entry). The replaced chunk counts as newly
  // inserted with the eviction policy; it is not reported to the observer (it did not come or go).
  // Put's errors.
  absl::StatusOr<bool> Replace(const DiskPut& put, const DiskChunkInfo& expected);
  // Copies the live records of every sealed segment whose dead bytes are at least
  // `min_dead_fraction` of its size into the active segment, and deletes those segments. Reads
  // and Puts go on meanwhile. Returns the number of segments deleted. Segments whose live bytes
  // do not fit in the free capacity are skipped.
  absl::StatusOr<int> Compact(double min_dead_fraction = 0.5);

  // Registers `regions` (disjoint) with every io engine of the tier, those lent out now and those
  // made later included, in place of earlier regions; none unregisters (IoEnginePool::
  // RegisterMemory). Reads into and writes from registered memory then skip pinning its pages
  // per request. The caller keeps the regions mapped until it registers others (unregisters)
  // or destroys the tier. An error says why the kernel refused (ENOMEM over RLIMIT_MEMLOCK, ...):
  // the tier works either way, without registered buffers; the caller logs it.
  absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions);

  DiskTierStats stats() const;
  // The engine kind the pool's engines report ("io_uring" or "sync").
  std::string engine_name() const;

 private:
  // What Lookup and List report of an indexed chunk.
  static DiskChunkInfo InfoOf(const IndexEntry& entry);
  // The index entry of `put`'s record written at `position`, and the header of a record.
  static IndexEntry EntryOf(const DiskPut& put, LogPosition position);
  static RecordHeader HeaderOf(const ChunkKey& key, const IndexEntry& entry);
  // Whether `key` is indexed as `expected` describes it (Replace and DropCorrupt act only then).
  bool MatchesLocked(const ChunkKey& key, const DiskChunkInfo& expected) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Chunk {
    IndexEntry entry;
    ChunkId policy_id = kNoChunk;
  };
  struct Segment {
    std::shared_ptr<SegmentFile> file;
    uint64_t size_bytes = 0;  // the write head: every byte below it is taken
    uint64_t live_bytes = 0;  // records of resident chunks
    uint32_t pending = 0;     // records being written into it
    bool compacting = false;  // CompactSegment is copying its records out
  };
  // A record's place, reserved by Reserve and not yet committed or released.
  struct Reservation {
    std::shared_ptr<SegmentFile> file;
    LogPosition position;
    uint64_t record_bytes = 0;
  };
  // A Put's record from reservation to commit. `status` is the write's result, then the
  // commit's; `done` is set (under mu_) once the record is committed or failed.
  struct PendingRecord {
    size_t put = 0;  // index into PutBatch's span
    ChunkKey key;
    Reservation reservation;
    IndexEntry entry;
    bool staged = false;
    absl::Status status;
    bool done = false;
  };
  using EngineLease = IoEnginePool::Lease;

  explicit DiskTier(const DiskTierOptions& options);

  // Open's steps (disk_tier_recovery.cc).
  absl::Status Recover();
  absl::Status ReconcileSegment(Segment& segment, uint64_t from_offset, IoEngine& engine)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<EngineLease> LeaseEngine() const;

  // Reserves `record_bytes` at the end of the active segment (starting a new one when it is
  // full); the caller has checked the space.
  absl::StatusOr<Reservation> Reserve(uint64_t record_bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes room for a Put of `record_bytes` within capacity_bytes - 2 * segment_bytes: evicts
  // victims and deletes segments without live records. Returns a segment to compact (or evict)
  // when dead records in it must go first, nullopt when the room is there.
  absl::StatusOr<std::optional<uint64_t>> MakeRoom(uint64_t record_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evicts every chunk of a sealed, idle segment and deletes it.
  absl::Status EvictSegmentLocked(uint64_t segment_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Creates and preallocates a new active segment, sealing the previous one.
  absl::Status StartSegment() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees a segment's preallocated blocks past its last record; it takes no more appends.
  void SealLocked(Segment& segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Disk blocks of the segment files once `record_bytes` more are reserved: every record, and
  // the preallocated rest of the (possibly new) active segment.
  uint64_t BlocksAfterLocked(uint64_t record_bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends a reservation: the record's place is no longer pending (its bytes are live once a
  // chunk is inserted there, dead otherwise).
  void Release(const Reservation& reservation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  LogPosition WatermarkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes room for and reserves the record of `put`; nullopt when its key is already stored
  // or being stored (nothing to do).
  absl::StatusOr<std::optional<Reservation>> ReserveFor(const DiskPut& put);
  // Writes the records (no lock held), then commits them through the commit queue; sets each
  // one's status.
  void WriteAndCommit(std::span<const DiskPut> puts, std::span<PendingRecord> records);
  // Queues written records and returns once every one of them is done, leading groups (see
  // the header comment) while no other writer does.
  void GroupCommit(std::span<PendingRecord> records);
  // Ends the reservations of a group whose segments were synced (`sync_status` per record),
  // writes the index entries of the synced ones in one batch and inserts them; marks all done.
  void CommitGroupLocked(std::span<PendingRecord* const> group,
                         std::span<const absl::Status> sync_status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts `key` at `entry` in memory and policy; its index entry is written already.
  void InsertLocked(const ChunkKey& key, const IndexEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a resident chunk from memory, policy (unless `popped`) and index. `key` is a copy:
  // callers may pass a reference into the maps it erases from.
  // Adds (sign > 0) or takes away a resident chunk's decoded bytes and encoded count.
  void CountEncodingLocked(const IndexEntry& entry, int sign) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DropLocked(ChunkKey key, bool popped, RemovalCause cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes a sealed segment with no live and no pending record.
  void RetireLocked(uint64_t segment_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes room for and reserves a record of `record_bytes` (compacting or evicting a segment
  // when dead records take the space) while `wanted` holds, then runs `claim` under the same
  // hold of mu_; nullopt when `wanted` no longer holds. Both run under mu_.
  absl::StatusOr<std::optional<Reservation>> ReserveWhile(uint64_t record_bytes,
                                                          absl::FunctionRef<bool()> wanted,
                                                          absl::FunctionRef<void()> claim);
  // Points `chunk` at `entry` (another record of the same chunk, indexed already), moving its
  // live bytes and counts.
  void SwapEntryLocked(const ChunkKey& key, Chunk& chunk, const IndexEntry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies the live records of one segment forward (disk_tier_compaction.cc).
  // True when the segment was deleted; false when it is busy, gone, or there was no room.
  absl::StatusOr<bool> CompactSegment(uint64_t segment_id);
  // Copies `live` records of `source` forward; false when there was no room for one of them.
  absl::StatusOr<bool> MoveRecords(uint64_t segment_id, const SegmentFile& source,
                                   std::span<const std::pair<ChunkKey, IndexEntry>> live);

  const DiskTierOptions options_;

  mutable IoEnginePool engines_;

  std::unique_ptr<DiskIndex> index_;

  mutable absl::Mutex mu_;
  std::unique_ptr<EvictionPolicy> policy_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ChunkKey, Chunk> chunks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::shared_ptr<const KvLayout>> layouts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ChunkId, ChunkKey> by_policy_id_ ABSL_GUARDED_BY(mu_);
  ChunkId next_policy_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_set<ChunkKey> writing_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, Segment> segments_ ABSL_GUARDED_BY(mu_);
  uint64_t active_segment_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<LogPosition> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Written records waiting for a group commit, and whether a leader is syncing a group.
  std::vector<PendingRecord*> commit_queue_ ABSL_GUARDED_BY(mu_);
  bool committing_ ABSL_GUARDED_BY(mu_) = false;
  DiskTierStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage
