// HostTier's private helpers that several host_tier*.cc files inline, on their hot paths
// (Lookup, Contains, Reserve, Commit, lease release) among others: which shard holds a key, how
// many pages a size takes, and freeing a chunk's record once nothing refers to it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/chunk_key.h"
#include "storage/host/host_tier.h"
#include "storage/host/internal/chunk_record.h"

namespace strata::storage {

inline size_t HostTier::ShardIndex(const ChunkKey& key) {
  return key.ShortHash() % internal_host::kNumShards;
}

inline HostTier::Shard& HostTier::ShardFor(const ChunkKey& key) const {
  return shards_[ShardIndex(key)];
}

inline uint32_t HostTier::PagesFor(uint64_t size_bytes) const {
  return static_cast<uint32_t>((size_bytes + options_.page_bytes - 1) / options_.page_bytes);
}

inline void HostTier::MaybeDestroyLocked(Record* record) {
  if (record->state == internal_host::ChunkState::kDropped && record->leases == 0 &&
      record->extents.empty()) {
    delete record;
  }
}

}  // namespace strata::storage
