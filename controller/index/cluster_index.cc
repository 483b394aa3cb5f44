#include "controller/index/cluster_index.h"

#include <algorithm>
#include <bit>
#include <tuple>

#include "absl/container/inlined_vector.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace strata::controller {
namespace {

using internal_index::Holder;
using internal_index::HolderList;
using internal_index::InstanceTable;

// How many events ahead of the one being applied Ingest prefetches the table entry.
constexpr size_t kPrefetchDistance = 8;
// How many chunks ahead of the one it finds LookupChain prefetches: about the misses a core keeps
// in flight (on the 100 x 1M bench, 32 was no faster).
constexpr size_t kLookupPrefetch = 16;

absl::Status ValidateEvent(const ChunkEvent& event, size_t index) {
  switch (event.kind) {
    case ChunkEventKind::kStored:
    case ChunkEventKind::kRemoved:
      if (static_cast<size_t>(event.tier) >= kTierCount) {
        return absl::InvalidArgumentError(absl::StrCat(
            "event ", index, ": tier ", static_cast<int>(event.tier), " is out of range"));
      }
      if (event.key.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("event ", index, ": empty chunk key"));
      }
      return absl::OkStatus();
    case ChunkEventKind::kCleared:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("event ", index, ": unknown kind ", static_cast<int>(event.kind)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterIndex>> ClusterIndex::Create(
    const ClusterIndexOptions& options) {
  if (options.max_instances == 0 || options.max_instances > InstanceTable::kMaxInstances) {
    return absl::InvalidArgumentError(absl::StrCat("max_instances ", options.max_instances,
                                                   " is not in [1, ", InstanceTable::kMaxInstances,
                                                   "]"));
  }
  if (!std::has_single_bit(options.shard_count) || options.shard_count > (1u << 16)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_count ", options.shard_count, " is not a power of two in [1, 65536]"));
  }
  return absl::WrapUnique(new ClusterIndex(options));
}

ClusterIndex::ClusterIndex(const ClusterIndexOptions& options)
    : shard_shift_(64 - static_cast<uint32_t>(std::countr_zero(options.shard_count))),
      shards_(options.shard_count),
      instances_(options.max_instances) {}

absl::Status ClusterIndex::RegisterInstance(std::string_view instance_id) {
  absl::MutexLock lock(&mu_);
  return instances_.Register(instance_id).status();
}

absl::Status ClusterIndex::DropInstance(std::string_view instance_id) {
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(const uint16_t slot, instances_.Find(instance_id));
  RetireGenerationLocked(slot, /*drop=*/true);
  return absl::OkStatus();
}

absl::Status ClusterIndex::Ingest(std::string_view instance_id,
                                  std::span<const ChunkEvent> events) {
  for (size_t i = 0; i < events.size(); ++i) STRATA_RETURN_IF_ERROR(ValidateEvent(events[i], i));
  absl::MutexLock lock(&mu_);
  STRATA_ASSIGN_OR_RETURN(const uint16_t slot, instances_.Find(instance_id));
  for (size_t i = 0; i < events.size(); ++i) {
    if (i + kPrefetchDistance < events.size()) {
      const ChunkEvent& ahead = events[i + kPrefetchDistance];
      if (ahead.kind != ChunkEventKind::kCleared) {
        const uint64_t key = IndexKey(ahead.key);
        shards_[ShardIndex(key)].Prefetch(key);
      }
    }
    const ChunkEvent& event = events[i];
    switch (event.kind) {
      case ChunkEventKind::kStored:
        StoreLocked(slot, IndexKey(event.key), event.tier);
        break;
      case ChunkEventKind::kRemoved:
        RemoveLocked(slot, IndexKey(event.key), event.tier);
        break;
      case ChunkEventKind::kCleared:
        RetireGenerationLocked(slot, /*drop=*/false);
        break;
    }
  }
  return absl::OkStatus();
}

size_t ClusterIndex::PurgeStaleLocked(HolderList& list) {
  const size_t heap_before = internal_index::HeapBytes(list);
  holder_entries_ -= internal_index::PurgeStale(list, instances_.live_tags());
  return heap_before;
}

void ClusterIndex::StoreLocked(uint16_t slot, uint64_t index_key, Tier tier) {
  HolderList& list = shards_[ShardIndex(index_key)].FindOrInsert(index_key);
  const size_t heap_before = PurgeStaleLocked(list);
  if (internal_index::AddTier(list, slot, instances_.generation_tag(slot), tier)) {
    ++holder_entries_;
    ++live_entries_;
    instances_.AddLiveEntries(slot, 1);
  }
  heap_bytes_ = heap_bytes_ - heap_before + internal_index::HeapBytes(list);
}

void ClusterIndex::RemoveLocked(uint16_t slot, uint64_t index_key, Tier tier) {
  Shard& shard = shards_[ShardIndex(index_key)];
  HolderList* list = shard.Find(index_key);
  if (list == nullptr) return;
  const size_t heap_before = PurgeStaleLocked(*list);
  if (internal_index::RemoveTier(*list, slot, tier)) {
    --holder_entries_;
    --live_entries_;
    instances_.AddLiveEntries(slot, -1);
  }
  if (list->empty()) {
    heap_bytes_ -= heap_before;  // the erasure frees the list's heap block
    shard.Erase(index_key);
  } else {
    heap_bytes_ = heap_bytes_ - heap_before + internal_index::HeapBytes(*list);
  }
}

void ClusterIndex::RetireGenerationLocked(uint16_t slot, bool drop) {
  if (instances_.GenerationWindowFull(slot)) SweepAllLocked();
  live_entries_ -= drop ? instances_.Drop(slot) : instances_.Clear(slot);
}

std::vector<InstanceChainHit> ClusterIndex::LookupChain(std::span<const ChunkKey> keys) const {
  struct Candidate {
    uint16_t slot = 0;
    uint8_t last_tier = 0;  // of the last chunk counted
    uint32_t chunks = 0;
    std::array<uint32_t, kTierCount> per_tier{};
  };
  absl::InlinedVector<Candidate, 8> candidates;  // sorted by slot
  absl::InlinedVector<uint32_t, 8> active;       // indices of those still matching, in order
  // Runs of chunks with the same holder list as the chunk before (a chain's usual shape): each
  // chunk of the run is counted like that chunk, in one go when the run ends.
  const HolderList* previous = nullptr;
  uint32_t repeats = 0;
  const auto count_repeats = [&] {
    for (const uint32_t index : active) {
      Candidate& c = candidates[index];
      c.chunks += repeats;
      c.per_tier[c.last_tier] += repeats;
    }
    repeats = 0;
  };

  absl::ReaderMutexLock lock(&mu_);
  const std::span<const uint16_t> live_tags = instances_.live_tags();
  // Chunk `i` of the chain: false when the walk stops there.
  const auto step = [&](size_t i, const HolderList* list) {
    if (list == nullptr) return false;
    if (previous != nullptr && internal_index::SameHolders(*list, *previous)) {
      ++repeats;
      return true;
    }
    count_repeats();
    previous = list;
    const Holder* const holders = list->data();
    const Holder* const holders_end = holders + list->size();
    if (i == 0) {
      for (const Holder* h = holders; h != holders_end; ++h) {
        if (internal_index::LiveTagOf(*h) != live_tags[h->slot]) continue;
        const auto tier = static_cast<uint8_t>(internal_index::FastestTier(h->tiers));
        Candidate c{.slot = h->slot, .last_tier = tier, .chunks = 1};
        c.per_tier[tier] = 1;
        active.push_back(static_cast<uint32_t>(candidates.size()));
        candidates.push_back(c);
      }
      return !active.empty();
    }
    // Both sorted by slot: one merge pass.
    Candidate* const found = candidates.data();
    uint32_t* const still = active.data();
    size_t kept = 0;
    const Holder* h = holders;
    for (size_t k = 0; k < active.size(); ++k) {
      Candidate& c = found[still[k]];
      while (h != holders_end && h->slot < c.slot) ++h;
      if (h == holders_end) break;
      if (h->slot == c.slot && internal_index::LiveTagOf(*h) == live_tags[c.slot]) {
        c.last_tier = static_cast<uint8_t>(internal_index::FastestTier(h->tiers));
        ++c.chunks;
        ++c.per_tier[c.last_tier];
        still[kept++] = still[k];
      }
    }
    active.resize(kept);
    return kept > 0;
  };
  // Chunk i + kLookupPrefetch's entry is prefetched before chunk i is found, so that the cache
  // misses of the chain overlap; `ahead` holds the index keys in between (0: an empty ChunkKey,
  // where the walk stops).
  std::array<uint64_t, kLookupPrefetch> ahead;
  const Shard* const shards = shards_.data();
  const auto fetch = [&](size_t i) {
    const uint64_t index_key = keys[i].empty() ? 0 : IndexKey(keys[i]);
    ahead[i % kLookupPrefetch] = index_key;
    shards[ShardIndex(index_key)].Prefetch(index_key);
  };
  for (size_t i = 0; i < std::min(keys.size(), kLookupPrefetch); ++i) fetch(i);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t index_key = ahead[i % kLookupPrefetch];
    if (i + kLookupPrefetch < keys.size()) fetch(i + kLookupPrefetch);
    if (!step(i, index_key == 0 ? nullptr : shards[ShardIndex(index_key)].Find(index_key))) break;
  }
  count_repeats();

  std::vector<InstanceChainHit> hits;
  hits.reserve(candidates.size());
  for (const Candidate& c : candidates) {
    hits.push_back({.instance_id = instances_.instance_id(c.slot),
                    .prefix_chunks = c.chunks,
                    .chunks_per_tier = c.per_tier});
  }
  std::sort(hits.begin(), hits.end(), [](const InstanceChainHit& a, const InstanceChainHit& b) {
    return std::tie(b.prefix_chunks, a.instance_id) < std::tie(a.prefix_chunks, b.instance_id);
  });
  return hits;
}

SweepResult ClusterIndex::Sweep(uint64_t max_chunks) {
  absl::MutexLock lock(&mu_);
  SweepResult total;
  for (size_t step = 0; step < shards_.size() && total.visited_chunks < max_chunks; ++step) {
    const SweepResult result = SweepStepLocked();
    total.visited_chunks += result.visited_chunks;
    total.reclaimed_entries += result.reclaimed_entries;
    total.pass_completed = total.pass_completed || result.pass_completed;
  }
  return total;
}

SweepResult ClusterIndex::SweepStepLocked() {
  if (sweep_cursor_ == 0) instances_.BeginSweepPass();
  Shard& shard = shards_[sweep_cursor_];
  SweepResult result{.visited_chunks = shard.size()};
  const std::span<const uint16_t> live_tags = instances_.live_tags();
  int64_t heap_delta = 0;  // erased lists' heap blocks are freed by the erasure
  shard.EraseIf([&](HolderList& list) {
    const size_t heap_before = internal_index::HeapBytes(list);
    result.reclaimed_entries += internal_index::PurgeStale(list, live_tags);
    const size_t heap_after = list.empty() ? 0 : internal_index::HeapBytes(list);
    heap_delta += static_cast<int64_t>(heap_after) - static_cast<int64_t>(heap_before);
    return list.empty();
  });
  heap_bytes_ = static_cast<uint64_t>(static_cast<int64_t>(heap_bytes_) + heap_delta);
  holder_entries_ -= result.reclaimed_entries;
  if (shard.size() * 4 < shard.capacity()) shard.ShrinkToFit();
  if (++sweep_cursor_ == shards_.size()) {
    sweep_cursor_ = 0;
    instances_.EndSweepPass();
    result.pass_completed = true;
  }
  return result;
}

void ClusterIndex::SweepAllLocked() {
  while (sweep_cursor_ != 0) SweepStepLocked();
  do {
    SweepStepLocked();
  } while (sweep_cursor_ != 0);
}

ClusterIndexStats ClusterIndex::stats() const {
  absl::ReaderMutexLock lock(&mu_);
  ClusterIndexStats stats;
  stats.instances = instances_.registered();
  stats.live_entries = live_entries_;
  stats.stale_entries = holder_entries_ - live_entries_;
  uint64_t table_bytes = shards_.capacity() * sizeof(Shard);
  for (const Shard& shard : shards_) {
    stats.chunks += shard.size();
    table_bytes += shard.MemoryBytes();
  }
  stats.memory_bytes = table_bytes + heap_bytes_ + instances_.MemoryBytes();
  return stats;
}

}  // namespace strata::controller
