// DiskIndex is the disk tier's durable index, a RocksDB database beside the segment files:
// ChunkKey -> IndexEntry (where the record lies and what it holds), plus the watermark, the
// position in the segment log before which every record is accounted for by the index.
//
// Durability: the tier writes an entry only after its record's payload is durable (fdatasync'd),
// so an entry never names bytes that can vanish. Index writes append to RocksDB's WAL without an
// fsync unless `sync_writes` is set: a killed process loses nothing (the WAL is in the page
// cache), and after a power loss the lost tail of index writes is rebuilt from the segments,
// because the watermark is lost with them and start-up reconciliation rescans from the older one.
// Sync() makes every write so far durable.
//
// Thread-safe (RocksDB's own locking); owns the database, closed on destruction.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/disk/record_format.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace strata::storage {

// Where a record lies in the segment log, and what it holds.
struct IndexEntry {
  uint64_t segment_id = 0;
  uint64_t offset = 0;         // of the record's header block
  uint64_t payload_bytes = 0;  // stored
  uint64_t payload_checksum = 0;
  uint64_t layout_fingerprint = 0;
  uint32_t num_tokens = 0;
  StoredEncoding encoding;  // the record header's
  std::string tenant;       // the record header's: "" for none

  friend bool operator==(const IndexEntry&, const IndexEntry&) = default;
};

// A position in the segment log: segments in id order, offsets within a segment.
struct LogPosition {
  uint64_t segment_id = 0;
  uint64_t offset = 0;

  friend auto operator<=>(const LogPosition&, const LogPosition&) = default;
};

struct DiskIndexOptions {
  std::string path;
  // fsync RocksDB's WAL on every write (see the header comment for why the default is off).
  bool sync_writes = false;
};

class DiskIndex {
 public:
  // Opens or creates the database at options.path; kUnavailable (with RocksDB's message) when it
  // cannot be opened.
  static absl::StatusOr<std::unique_ptr<DiskIndex>> Open(const DiskIndexOptions& options);
  ~DiskIndex();
  DiskIndex(const DiskIndex&) = delete;
  DiskIndex& operator=(const DiskIndex&) = delete;

  // Writes `entry` for `key` and the watermark, atomically.
  absl::Status Put(const ChunkKey& key, const IndexEntry& entry, const LogPosition& watermark);
  // Writes every entry and the watermark in one atomic batch (one WAL append).
  absl::Status PutBatch(std::span<const std::pair<ChunkKey, IndexEntry>> entries,
                        const LogPosition& watermark);
  // Removes `key` (absent keys are fine).
  absl::Status Delete(const ChunkKey& key);
  // The stored watermark; {0, 0} (the start of the log) when none was written.
  absl::StatusOr<LogPosition> Watermark() const;
  absl::Status SetWatermark(const LogPosition& watermark);

  // Calls `fn` for every entry in key order. Entries that cannot be decoded are deleted and
  // counted in the result's first field; the second is the number of entries visited.
  struct ScanCounts {
    uint64_t undecodable = 0;
    uint64_t entries = 0;
  };
  absl::StatusOr<ScanCounts> ForEach(
      absl::FunctionRef<void(const ChunkKey&, const IndexEntry&)> fn);

  // Calls `fn` for at most `limit` entries in key order (EncodeKey's bytes), from the first one
  // after `after` (from the first entry when nullopt). Entries that cannot be decoded are skipped
  // (ForEach deletes them). Returns whether entries remain past the last one visited. A
  // consistent view of the index as of the call.
  absl::StatusOr<bool> ForEachAfter(
      const std::optional<ChunkKey>& after, size_t limit,
      absl::FunctionRef<void(const ChunkKey&, const IndexEntry&)> fn) const;

  // Keeps `layout` (KvLayout::Encode) under its fingerprint, for decoding encoded records after
  // a restart; rewriting one is harmless.
  absl::Status PutLayout(const KvLayout& layout);
  // Every layout kept. Entries that do not decode are skipped.
  absl::StatusOr<std::vector<KvLayout>> Layouts() const;

  // Makes every write so far durable (fsyncs the WAL).
  absl::Status Sync();

  // Disk blocks the database's files take now (WAL, tables, manifest, logs): what the disk
  // tier counts against its capacity. Lists the directory (a few dozen files); files RocksDB
  // deletes while it runs are skipped.
  uint64_t FileBytes() const;

 private:
  DiskIndex(std::unique_ptr<rocksdb::DB> db, std::string path, bool sync_writes);

  std::unique_ptr<rocksdb::DB> db_;
  const std::string path_;
  bool sync_writes_;
};

}  // namespace strata::storage
