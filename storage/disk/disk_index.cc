#include "storage/disk/disk_index.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <string_view>

#include "fmt/format.h"
#include "storage/disk/record_format.h"

namespace strata::storage {
namespace {

// Entries live under "k" + EncodeKey(key); metadata under "m".
constexpr char kEntryPrefix = 'k';
constexpr std::string_view kWatermarkKey = "m/watermark";
constexpr std::string_view kLayoutPrefix = "m/layout/";  // + 16 hex digits of the fingerprint
// Version 1: a chunk stored as it is; version 2 adds the encoding (codec u16, decoded bytes and
// checksum u64); version 3 adds the encoding's measured errors (relative, max absolute: f32);
// version 4, a chunk a tenant stored, has version 3's fields (zero encoding for a chunk stored as
// it is, errors -1 when not measured) followed by the tenant's name (its size u16, then its
// bytes). Each entry is written in the lowest version that holds it.
constexpr uint8_t kEntryVersion = 1;
constexpr uint8_t kEncodedEntryVersion = 2;
constexpr uint8_t kMeasuredEntryVersion = 3;
constexpr uint8_t kTenantEntryVersion = 4;
constexpr size_t kEntryBytes = 1 + 5 * 8 + 4;
constexpr size_t kEncodedEntryBytes = kEntryBytes + 2 + 2 * 8;
constexpr size_t kMeasuredEntryBytes = kEncodedEntryBytes + 2 * 4;
constexpr size_t kTenantEntryBytes = kMeasuredEntryBytes + 2;  // + the tenant's bytes

absl::Status FromRocks(const rocksdb::Status& status, std::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = fmt::format("disk index: {}: {}", what, status.ToString());
  if (status.IsCorruption()) return absl::DataLossError(message);
  if (status.IsNoSpace()) return absl::ResourceExhaustedError(message);
  return absl::UnavailableError(message);
}

std::string EntryKey(const ChunkKey& key) { return kEntryPrefix + EncodeKey(key); }

std::string EncodeEntry(const IndexEntry& entry) {
  const bool tenant = !entry.tenant.empty();
  const bool encoded = entry.encoding.encoded();
  const bool measured = encoded && entry.encoding.relative_error >= 0;
  std::string out(tenant     ? kTenantEntryBytes + entry.tenant.size()
                  : measured ? kMeasuredEntryBytes
                  : encoded  ? kEncodedEntryBytes
                             : kEntryBytes,
                  '\0');
  char* p = out.data();
  *p++ = static_cast<char>(tenant     ? kTenantEntryVersion
                           : measured ? kMeasuredEntryVersion
                           : encoded  ? kEncodedEntryVersion
                                      : kEntryVersion);
  for (uint64_t field : {entry.segment_id, entry.offset, entry.payload_bytes,
                         entry.payload_checksum, entry.layout_fingerprint}) {
    std::memcpy(p, &field, 8);
    p += 8;
  }
  std::memcpy(p, &entry.num_tokens, 4);
  if (!encoded && !tenant) return out;
  p += 4;
  std::memcpy(p, &entry.encoding.codec, 2);
  std::memcpy(p + 2, &entry.encoding.decoded_bytes, 8);
  std::memcpy(p + 10, &entry.encoding.decoded_checksum, 8);
  if (!measured && !tenant) return out;
  const float relative_error = measured ? entry.encoding.relative_error : -1.0f;
  const float max_abs_error = measured ? entry.encoding.max_abs_error : -1.0f;
  std::memcpy(p + 18, &relative_error, 4);
  std::memcpy(p + 22, &max_abs_error, 4);
  if (!tenant) return out;
  const auto tenant_bytes = static_cast<uint16_t>(entry.tenant.size());
  std::memcpy(p + 26, &tenant_bytes, 2);
  std::memcpy(p + 28, entry.tenant.data(), entry.tenant.size());
  return out;
}

bool DecodeEntry(std::string_view bytes, IndexEntry& entry) {
  if (bytes.empty()) return false;
  const uint8_t version = static_cast<uint8_t>(bytes[0]);
  if (!(version == kEntryVersion && bytes.size() == kEntryBytes) &&
      !(version == kEncodedEntryVersion && bytes.size() == kEncodedEntryBytes) &&
      !(version == kMeasuredEntryVersion && bytes.size() == kMeasuredEntryBytes) &&
      !(version == kTenantEntryVersion && bytes.size() > kTenantEntryBytes &&
        bytes.size() <= kTenantEntryBytes + kMaxRecordTenantBytes)) {
    return false;
  }
  const char* p = bytes.data() + 1;
  for (uint64_t* field : {&entry.segment_id, &entry.offset, &entry.payload_bytes,
                          &entry.payload_checksum, &entry.layout_fingerprint}) {
    std::memcpy(field, p, 8);
    p += 8;
  }
  std::memcpy(&entry.num_tokens, p, 4);
  entry.encoding = {};
  entry.tenant.clear();
  if (version == kEntryVersion) return true;
  p += 4;
  std::memcpy(&entry.encoding.codec, p, 2);
  std::memcpy(&entry.encoding.decoded_bytes, p + 2, 8);
  std::memcpy(&entry.encoding.decoded_checksum, p + 10, 8);
  if (version == kEncodedEntryVersion) return entry.encoding.encoded();
  std::memcpy(&entry.encoding.relative_error, p + 18, 4);
  std::memcpy(&entry.encoding.max_abs_error, p + 22, 4);
  const bool measured = entry.encoding.relative_error >= 0 && entry.encoding.max_abs_error >= 0;
  if (version == kMeasuredEntryVersion) return measured && entry.encoding.encoded();
  // Version 4: errors both measured or both -1; a plain chunk's encoding fields all zero.
  uint16_t tenant_bytes = 0;
  std::memcpy(&tenant_bytes, p + 26, 2);
  if (tenant_bytes == 0 || kTenantEntryBytes + tenant_bytes != bytes.size()) return false;
  entry.tenant.assign(p + 28, tenant_bytes);
  if (!measured && !(entry.encoding.relative_error == -1 && entry.encoding.max_abs_error == -1)) {
    return false;
  }
  if (!entry.encoding.encoded()) {
    const bool zero =
        entry.encoding.decoded_bytes == 0 && entry.encoding.decoded_checksum == 0 && !measured;
    entry.encoding = {};
    return zero;
  }
  return true;
}

std::string EncodePosition(const LogPosition& position) {
  std::string out(16, '\0');
  std::memcpy(out.data(), &position.segment_id, 8);
  std::memcpy(out.data() + 8, &position.offset, 8);
  return out;
}

}  // namespace

DiskIndex::DiskIndex(std::unique_ptr<rocksdb::DB> db, std::string path, bool sync_writes)
    : db_(std::move(db)), path_(std::move(path)), sync_writes_(sync_writes) {}

DiskIndex::~DiskIndex() = default;

absl::StatusOr<std::unique_ptr<DiskIndex>> DiskIndex::Open(const DiskIndexOptions& options) {
  rocksdb::Options rocks_options;
  rocks_options.create_if_missing = true;
  // A torn WAL tail (killed process, power loss) is dropped: the segments rebuild it.
  rocks_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  rocks_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  rocks_options.keep_log_file_num = 2;
  // The index's files count against the tier's capacity (FileBytes), so keep them to what they
  // hold: no preallocated WAL blocks, and a memtable (hence a WAL) of at most 8 MiB (~50k
  // entries) before it is flushed to a table.
  rocks_options.allow_fallocate = false;
  rocks_options.write_buffer_size = 8u << 20;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status status = rocksdb::DB::Open(rocks_options, options.path, &raw);
  if (!status.ok()) return FromRocks(status, fmt::format("open {}", options.path));
  return std::unique_ptr<DiskIndex>(
      new DiskIndex(std::unique_ptr<rocksdb::DB>(raw), options.path, options.sync_writes));
}

absl::Status DiskIndex::Put(const ChunkKey& key, const IndexEntry& entry,
                            const LogPosition& watermark) {
  const std::pair<ChunkKey, IndexEntry> entries[] = {{key, entry}};
  return PutBatch(entries, watermark);
}

absl::Status DiskIndex::PutBatch(std::span<const std::pair<ChunkKey, IndexEntry>> entries,
                                 const LogPosition& watermark) {
  rocksdb::WriteBatch batch;
  for (const auto& [key, entry] : entries) batch.Put(EntryKey(key), EncodeEntry(entry));
  batch.Put(rocksdb::Slice(kWatermarkKey.data(), kWatermarkKey.size()), EncodePosition(watermark));
  rocksdb::WriteOptions write_options;
  write_options.sync = sync_writes_;
  return FromRocks(db_->Write(write_options, &batch), "put");
}

absl::Status DiskIndex::Delete(const ChunkKey& key) {
  rocksdb::WriteOptions write_options;
  write_options.sync = sync_writes_;
  return FromRocks(db_->Delete(write_options, EntryKey(key)), "delete");
}

absl::StatusOr<LogPosition> DiskIndex::Watermark() const {
  std::string value;
  const rocksdb::Status status = db_->Get(
      rocksdb::ReadOptions(), rocksdb::Slice(kWatermarkKey.data(), kWatermarkKey.size()), &value);
  if (status.IsNotFound()) return LogPosition{};
  if (!status.ok()) return FromRocks(status, "read watermark");
  if (value.size() != 16) return absl::DataLossError("disk index: malformed watermark");
  LogPosition position;
  std::memcpy(&position.segment_id, value.data(), 8);
  std::memcpy(&position.offset, value.data() + 8, 8);
  return position;
}

absl::Status DiskIndex::SetWatermark(const LogPosition& watermark) {
  rocksdb::WriteOptions write_options;
  write_options.sync = sync_writes_;
  return FromRocks(
      db_->Put(write_options, rocksdb::Slice(kWatermarkKey.data(), kWatermarkKey.size()),
               EncodePosition(watermark)),
      "write watermark");
}

absl::StatusOr<DiskIndex::ScanCounts> DiskIndex::ForEach(
    absl::FunctionRef<void(const ChunkKey&, const IndexEntry&)> fn) {
  ScanCounts counts;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const char prefix[1] = {kEntryPrefix};
  for (it->Seek(rocksdb::Slice(prefix, 1)); it->Valid() && it->key()[0] == kEntryPrefix;
       it->Next()) {
    const rocksdb::Slice raw_key = it->key();
    const rocksdb::Slice raw_value = it->value();
    auto key = DecodeKey(std::string_view(raw_key.data() + 1, raw_key.size() - 1));
    IndexEntry entry;
    if (!key.ok() || !DecodeEntry(std::string_view(raw_value.data(), raw_value.size()), entry)) {
      ++counts.undecodable;
      if (absl::Status s = FromRocks(db_->Delete(rocksdb::WriteOptions(), raw_key), "delete");
          !s.ok()) {
        return s;
      }
      continue;
    }
    ++counts.entries;
    fn(*key, entry);
  }
  if (absl::Status s = FromRocks(it->status(), "scan"); !s.ok()) return s;
  return counts;
}

absl::StatusOr<bool> DiskIndex::ForEachAfter(
    const std::optional<ChunkKey>& after, size_t limit,
    absl::FunctionRef<void(const ChunkKey&, const IndexEntry&)> fn) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const std::string start = after.has_value() ? EntryKey(*after) : std::string(1, kEntryPrefix);
  it->Seek(start);
  if (after.has_value() && it->Valid() && it->key() == rocksdb::Slice(start)) it->Next();
  size_t visited = 0;
  for (; it->Valid() && it->key()[0] == kEntryPrefix && visited < limit; it->Next()) {
    const rocksdb::Slice raw_key = it->key();
    const rocksdb::Slice raw_value = it->value();
    auto key = DecodeKey(std::string_view(raw_key.data() + 1, raw_key.size() - 1));
    IndexEntry entry;
    if (!key.ok() || !DecodeEntry(std::string_view(raw_value.data(), raw_value.size()), entry)) {
      continue;
    }
    ++visited;
    fn(*key, entry);
  }
  if (absl::Status s = FromRocks(it->status(), "scan"); !s.ok()) return s;
  return it->Valid() && it->key()[0] == kEntryPrefix;
}

absl::Status DiskIndex::PutLayout(const KvLayout& layout) {
  rocksdb::WriteOptions write_options;
  write_options.sync = sync_writes_;
  const std::string key = fmt::format("{}{:016x}", kLayoutPrefix, layout.Fingerprint());
  return FromRocks(db_->Put(write_options, key, layout.Encode()), "write layout");
}

absl::StatusOr<std::vector<KvLayout>> DiskIndex::Layouts() const {
  std::vector<KvLayout> layouts;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  const rocksdb::Slice prefix(kLayoutPrefix.data(), kLayoutPrefix.size());
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    absl::StatusOr<KvLayout> layout =
        KvLayout::Decode(std::string_view(it->value().data(), it->value().size()));
    if (layout.ok()) layouts.push_back(*std::move(layout));
  }
  if (absl::Status s = FromRocks(it->status(), "scan layouts"); !s.ok()) return s;
  return layouts;
}

absl::Status DiskIndex::Sync() { return FromRocks(db_->SyncWAL(), "sync"); }

uint64_t DiskIndex::FileBytes() const {
  uint64_t total = 0;
  std::error_code error;
  for (const auto& dirent : std::filesystem::directory_iterator(path_, error)) {
    struct stat st {};
    if (::stat(dirent.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      total += static_cast<uint64_t>(st.st_blocks) * 512;
    }
  }
  return total;
}

}  // namespace strata::storage
