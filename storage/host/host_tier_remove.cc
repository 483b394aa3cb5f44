// HostTier's removal of committed chunks: Remove, RemoveIf and RemoveAll.
#include "storage/host/host_tier.h"

#include <vector>

#include "storage/host/internal/chunk_record.h"

namespace strata::storage {
namespace {

using internal_host::ChunkState;
using internal_host::kNumShards;

}  // namespace

absl::StatusOr<RemoveResult> HostTier::Remove(const ChunkKey& key) {
  if (key.empty()) return absl::InvalidArgumentError("host tier: remove: empty chunk key");
  absl::MutexLock lock(&mu_);
  Record* record = FindLocked(key);
  if (record == nullptr || record->state != ChunkState::kCommitted) return RemoveResult{};
  const RemoveResult result{.chunks = 1, .bytes = record->size_bytes};
  ++removed_;
  removed_bytes_ += record->size_bytes;
  DropLocked(record, clock_->Now(), RemovalCause::kRemoved, /*notify=*/true);
  return result;
}

RemoveResult HostTier::RemoveIf(absl::FunctionRef<bool(const ChunkKey&)> predicate) {
  RemoveResult result;
  for (size_t i = 0; i < kNumShards; ++i) {
    absl::MutexLock lock(&mu_);
    const MonoTime now = clock_->Now();
    std::vector<Record*> matches;
    {
      absl::ReaderMutexLock shard_lock(&shards_[i].mu);
      for (Record* record : shards_[i].records) {
        if (record->state == ChunkState::kCommitted && predicate(record->key)) {
          matches.push_back(record);
        }
      }
    }
    for (Record* record : matches) {
      ++result.chunks;
      result.bytes += record->size_bytes;
      ++removed_;
      removed_bytes_ += record->size_bytes;
      DropLocked(record, now, RemovalCause::kRemoved, /*notify=*/true);
    }
  }
  return result;
}

RemoveResult HostTier::RemoveAll() {
  RemoveResult result;
  absl::MutexLock lock(&mu_);
  const MonoTime now = clock_->Now();
  std::vector<Record*> committed;
  committed.reserve(chunks_);
  for (size_t i = 0; i < kNumShards; ++i) {
    absl::ReaderMutexLock shard_lock(&shards_[i].mu);
    for (Record* record : shards_[i].records) {
      if (record->state == ChunkState::kCommitted) committed.push_back(record);
    }
  }
  for (Record* record : committed) {
    ++result.chunks;
    result.bytes += record->size_bytes;
    ++removed_;
    removed_bytes_ += record->size_bytes;
    DropLocked(record, now, RemovalCause::kRemoved, /*notify=*/false);
  }
  if (observer_ != nullptr) observer_->OnCleared();
  return result;
}

}  // namespace strata::storage
