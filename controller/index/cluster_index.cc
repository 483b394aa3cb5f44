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
      shards_(std::make_unique<Shard[]>(options.shard_count)),
      shard_count_(options.shard_count),
      holders_(memory_),
      instances_(options.max_instances) {}

absl::Status ClusterIndex::RegisterInstance(std::string_view instance_id) {
  absl::MutexLock lock(&mu_);
  absl::MutexLock ids_lock(&ids_mu_);
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

void ClusterIndex::PurgeStaleLocked(HolderList& list) {
  holder_entries_ -= internal_index::PurgeStale(list, instances_.live_tags());
}

void ClusterIndex::StoreLocked(uint16_t slot, uint64_t index_key, Tier tier) {
  Shard& shard = shards_[ShardIndex(index_key)];
  size_t index = shard.Find(index_key);
  const uint64_t old_word = index == Shard::kNone ? 0 : shard.holders(index);
  HolderList list;
  holders_.Load(old_word, list);
  PurgeStaleLocked(list);
  if (internal_index::AddTier(list, slot, instances_.generation_tag(slot), tier)) {
    ++holder_entries_;
    ++live_entries_;
    instances_.AddLiveEntries(slot, 1);
  }
  if (index == Shard::kNone) {
    shard.ReserveOneMore(memory_);  // a growth publishes itself, outside the write below
    shard.BeginWrite();
    shard.Insert(index_key, holders_.Store(old_word, list));
  } else {
    shard.BeginWrite();
    shard.SetHolders(index, holders_.Store(old_word, list));
  }
  shard.EndWrite();
}

void ClusterIndex::RemoveLocked(uint16_t slot, uint64_t index_key, Tier tier) {
  Shard& shard = shards_[ShardIndex(index_key)];
  const size_t index = shard.Find(index_key);
  if (index == Shard::kNone) return;
  const uint64_t old_word = shard.holders(index);
  HolderList list;
  holders_.Load(old_word, list);
  PurgeStaleLocked(list);
  if (internal_index::RemoveTier(list, slot, tier)) {
    --holder_entries_;
    --live_entries_;
    instances_.AddLiveEntries(slot, -1);
  }
  if (list.empty()) {
    holders_.Release(old_word);
    shard.EraseAt(index);
  } else {
    shard.BeginWrite();
    shard.SetHolders(index, holders_.Store(old_word, list));
    shard.EndWrite();
  }
}

void ClusterIndex::RetireGenerationLocked(uint16_t slot, bool drop) {
  if (instances_.GenerationWindowFull(slot)) SweepAllLocked();
  if (drop) {
    absl::MutexLock ids_lock(&ids_mu_);
    live_entries_ -= instances_.Drop(slot);
  } else {
    live_entries_ -= instances_.Clear(slot);
  }
}

std::vector<InstanceChainHit> ClusterIndex::LookupChain(std::span<const ChunkKey> keys) const {
  struct Candidate {
    uint16_t slot = 0;
    uint16_t live_tag = 0;  // of its generation when the walk found it
    uint8_t last_tier = 0;  // of the last chunk counted
    uint32_t chunks = 0;
    std::array<uint32_t, kTierCount> per_tier{};
  };
  absl::InlinedVector<Candidate, 8> candidates;  // sorted by slot
  absl::InlinedVector<uint32_t, 8> active;       // indices of those still matching, in order
  // Runs of chunks with the same holders as the chunk before (a chain's usual shape): each
  // chunk of the run is counted like that chunk, in one go when the run ends.
  HolderList holders;   // of the chunk being looked at
  HolderList previous;  // of the chunk before, when i > 0
  uint32_t repeats = 0;
  const auto count_repeats = [&] {
    for (const uint32_t index : active) {
      Candidate& c = candidates[index];
      c.chunks += repeats;
      c.per_tier[c.last_tier] += repeats;
    }
    repeats = 0;
  };

  // Chunk `i` of the chain, whose holders are in `holders`: false when the walk stops there.
  const auto step = [&](size_t i) {
    if (holders.empty()) return false;
    if (i > 0 && internal_index::SameHolders(holders, previous)) {
      ++repeats;
      return true;
    }
    count_repeats();
    std::swap(previous, holders);  // `previous` is this chunk's from here on
    const Holder* const begin = previous.data();
    const Holder* const end = begin + previous.size();
    if (i == 0) {
      for (const Holder* h = begin; h != end; ++h) {
        const uint16_t live_tag = internal_index::LiveTagOf(*h);
        if (live_tag != instances_.LiveTag(h->slot)) continue;
        const auto tier = static_cast<uint8_t>(internal_index::FastestTier(h->tiers));
        Candidate c{.slot = h->slot, .live_tag = live_tag, .last_tier = tier, .chunks = 1};
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
    const Holder* h = begin;
    for (size_t k = 0; k < active.size(); ++k) {
      Candidate& c = found[still[k]];
      while (h != end && h->slot < c.slot) ++h;
      if (h == end) break;
      if (h->slot == c.slot && internal_index::LiveTagOf(*h) == c.live_tag) {
        c.last_tier = static_cast<uint8_t>(internal_index::FastestTier(h->tiers));
        ++c.chunks;
        ++c.per_tier[c.last_tier];
        still[kept++] = still[k];
      }
    }
    active.resize(kept);
    return kept > 0;
  };
  // Chunk i + kLookupPrefetch's entry is prefetched before chunk i is read, so that the cache
  // misses of the chain overlap; `ahead` holds the index keys in between (0: an empty ChunkKey,
  // where the walk stops).
  std::array<uint64_t, kLookupPrefetch> ahead;
  const auto fetch = [&](size_t i) {
    const uint64_t index_key = keys[i].empty() ? 0 : IndexKey(keys[i]);
    ahead[i % kLookupPrefetch] = index_key;
    shards_[ShardIndex(index_key)].Prefetch(index_key);
  };
  for (size_t i = 0; i < std::min(keys.size(), kLookupPrefetch); ++i) fetch(i);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t index_key = ahead[i % kLookupPrefetch];
    if (i + kLookupPrefetch < keys.size()) fetch(i + kLookupPrefetch);
    if (index_key == 0) break;
    shards_[ShardIndex(index_key)].Read(index_key,
                                        [&](uint64_t word) { holders_.Load(word, holders); });
    if (!step(i)) break;
  }
  count_repeats();

  std::vector<InstanceChainHit> hits;
  hits.reserve(candidates.size());
  {
    absl::ReaderMutexLock ids_lock(&ids_mu_);
    for (const Candidate& c : candidates) {
      // Dropped or cleared during the walk (its slot possibly registered again since).
      if (instances_.LiveTag(c.slot) != c.live_tag) continue;
      hits.push_back({.instance_id = instances_.instance_id(c.slot),
                      .prefix_chunks = c.chunks,
                      .chunks_per_tier = c.per_tier});
    }
  }
  std::sort(hits.begin(), hits.end(), [](const InstanceChainHit& a, const InstanceChainHit& b) {
    return std::tie(b.prefix_chunks, a.instance_id) < std::tie(a.prefix_chunks, b.instance_id);
  });
  return hits;
}

SweepResult ClusterIndex::Sweep(uint64_t max_chunks) {
  absl::MutexLock lock(&mu_);
  SweepResult total;
  for (size_t step = 0; step < shard_count_ && total.visited_chunks < max_chunks; ++step) {
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
  HolderList list;
  shard.EraseIf([&](size_t index) {
    const uint64_t word = shard.holders(index);
    if (internal_index::HolderStore::InlineAndCurrent(word, live_tags)) return false;
    holders_.Load(word, list);
    const size_t removed = internal_index::PurgeStale(list, live_tags);
    if (removed == 0) return false;
    result.reclaimed_entries += removed;
    if (list.empty()) {
      holders_.Release(word);
      return true;
    }
    shard.BeginWrite();
    shard.SetHolders(index, holders_.Store(word, list));
    shard.EndWrite();
    return false;
  });
  holder_entries_ -= result.reclaimed_entries;
  if (shard.size() * 4 < shard.capacity()) shard.ShrinkToFit(memory_);
  if (++sweep_cursor_ == shard_count_) {
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
  absl::MutexLock lock(&mu_);
  ClusterIndexStats stats;
  stats.instances = instances_.registered();
  stats.live_entries = live_entries_;
  stats.stale_entries = holder_entries_ - live_entries_;
  for (size_t s = 0; s < shard_count_; ++s) stats.chunks += shards_[s].size();
  stats.memory_bytes =
      shard_count_ * sizeof(Shard) + memory_.allocated_bytes() + instances_.MemoryBytes();
  return stats;
}

}  // namespace strata::controller
