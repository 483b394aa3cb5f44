#include "storage/device/device_pool.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "core/status_util.h"
#include "fmt/format.h"

namespace strata::storage {
namespace {

constexpr uint64_t kPageAlignment = 256;
constexpr uint64_t kMaxPoolBytes = uint64_t{1} << 48;

}  // namespace

absl::Status DevicePoolGeometry::Validate() const {
  if (num_layers == 0) return absl::InvalidArgumentError("device pool: num_layers is 0");
  if (num_pages == 0) return absl::InvalidArgumentError("device pool: num_pages is 0");
  if (page_bytes == 0 || page_bytes % kPageAlignment != 0) {
    return absl::InvalidArgumentError(fmt::format(
        "device pool: page_bytes {} is not a positive multiple of {}", page_bytes, kPageAlignment));
  }
  if (page_bytes > kMaxPoolBytes / num_pages || layer_stride_bytes() > kMaxPoolBytes / num_layers) {
    return absl::InvalidArgumentError(
        fmt::format("device pool: {} layers of {} pages of {} bytes exceed 2^48 bytes", num_layers,
                    num_pages, page_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<DevicePoolGeometry> DevicePoolGeometryFor(const KvLayout& layout,
                                                         uint32_t block_tokens,
                                                         uint32_t num_pages) {
  if (absl::Status valid = layout.Validate(); !valid.ok()) {
    return Annotate(valid, "device pool layout");
  }
  if (block_tokens == 0 || layout.chunk_tokens % block_tokens != 0) {
    return absl::InvalidArgumentError(
        fmt::format("device pool: a block of {} tokens does not divide a chunk of {} tokens",
                    block_tokens, layout.chunk_tokens));
  }
  DevicePoolGeometry geometry{.num_layers = layout.num_layers,
                              .num_pages = num_pages,
                              .page_bytes = layout.layer_bytes(block_tokens)};
  if (absl::Status valid = geometry.Validate(); !valid.ok()) return valid;
  return geometry;
}

absl::StatusOr<std::unique_ptr<DevicePool>> DevicePool::Create(DeviceRuntime& runtime,
                                                               const DevicePoolOptions& options) {
  if (absl::Status valid = options.geometry.Validate(); !valid.ok()) return valid;
  absl::StatusOr<std::unique_ptr<ShareableAllocation>> memory =
      runtime.AllocateShareable(options.geometry.total_bytes(), options.name);
  if (!memory.ok()) return Annotate(memory.status(), "device pool");
  return std::unique_ptr<DevicePool>(new DevicePool(options, *std::move(memory)));
}

DevicePool::DevicePool(const DevicePoolOptions& options,
                       std::unique_ptr<ShareableAllocation> memory)
    : geometry_(options.geometry),
      on_evict_(options.on_evict),
      on_evictable_(options.on_evictable),
      memory_(std::move(memory)) {
  absl::MutexLock lock(&mu_);
  free_pages_.reserve(geometry_.num_pages);
  // A stack: page 0 is handed out first.
  for (uint32_t page = geometry_.num_pages; page > 0; --page) free_pages_.push_back(page - 1);
  counters_.capacity_pages = geometry_.num_pages;
  counters_.page_bytes = geometry_.page_bytes;
}

DevicePool::~DevicePool() = default;

std::byte* DevicePool::PageData(uint32_t layer, uint32_t page) const {
  return static_cast<std::byte*>(memory_->data()) + geometry_.offset(layer, page);
}

absl::StatusOr<PoolReservation> DevicePool::Reserve(const ChunkKey& key, uint32_t num_pages,
                                                    uint64_t owner,
                                                    std::span<const uint32_t> positions) {
  if (key.empty()) return absl::InvalidArgumentError("device pool: reserve of an empty key");
  if (num_pages == 0 || num_pages > geometry_.num_pages) {
    return absl::InvalidArgumentError(fmt::format(
        "device pool: reserve of {} pages in a pool of {}", num_pages, geometry_.num_pages));
  }
  if (!positions.empty() && positions.size() != num_pages) {
    return absl::InvalidArgumentError(fmt::format(
        "device pool: {} page positions for a reserve of {} pages", positions.size(), num_pages));
  }
  if (std::adjacent_find(positions.begin(), positions.end(), std::greater_equal<>()) !=
      positions.end()) {
    return absl::InvalidArgumentError("device pool: page positions must be strictly ascending");
  }
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(key); it != index_.end()) {
    PoolReservation result;
    result.outcome = it->second->state == State::kCommitted ? PoolReserveOutcome::kAlreadyPresent
                                                            : PoolReserveOutcome::kInProgress;
    return result;
  }
  if (free_pages_.size() + evictable_pages_ < num_pages) {
    ++counters_.admission_rejects;
    return absl::ResourceExhaustedError(fmt::format(
        "device pool: {} pages wanted, {} free and {} evictable ({} referenced, {} reserved, {} "
        "waiting for their last reference)",
        num_pages, free_pages_.size(), evictable_pages_, committed_pages_ - evictable_pages_,
        reserved_pages_, pending_free_pages_));
  }
  while (free_pages_.size() < num_pages) {
    Chunk* victim = lru_.front();
    ++counters_.evictions;
    counters_.evicted_pages += victim->pages.size();
    if (on_evict_ && victim->whole()) on_evict_(*this, victim->key, victim->pages);
    DetachLocked(victim);
  }
  auto chunk = std::make_unique<Chunk>();
  chunk->key = key;
  chunk->positions.assign(positions.begin(), positions.end());
  chunk->pages.assign(free_pages_.end() - num_pages, free_pages_.end());
  std::reverse(chunk->pages.begin(), chunk->pages.end());
  free_pages_.resize(free_pages_.size() - num_pages);
  reserved_pages_ += num_pages;
  const uint64_t id = next_id_++;
  reservations_.emplace(id, Holder{chunk.get(), owner});
  owner_reservations_[owner].insert(id);
  PoolReservation result;
  result.id = id;
  result.pages = chunk->pages;
  index_.emplace(key, std::move(chunk));
  return result;
}

absl::Status DevicePool::Commit(uint64_t reservation_id) {
  absl::MutexLock lock(&mu_);
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) {
    return absl::NotFoundError(fmt::format(
        "device pool: no reservation {} (aborted, or its owner is gone)", reservation_id));
  }
  const Holder holder = it->second;
  reservations_.erase(it);
  owner_reservations_[holder.owner].erase(reservation_id);
  if (owner_reservations_[holder.owner].empty()) owner_reservations_.erase(holder.owner);
  Chunk* chunk = holder.chunk;
  reserved_pages_ -= chunk->pages.size();
  committed_pages_ += chunk->pages.size();
  chunk->state = State::kCommitted;
  ++counters_.commits;
  MakeEvictableLocked(chunk);
  if (on_evictable_ && chunk->whole()) on_evictable_(*this, chunk->key, holder.owner);
  return absl::OkStatus();
}

void DevicePool::Abort(uint64_t reservation_id) {
  absl::MutexLock lock(&mu_);
  AbortLocked(reservation_id);
}

size_t DevicePool::AbortOwner(uint64_t owner) {
  absl::MutexLock lock(&mu_);
  auto it = owner_reservations_.find(owner);
  if (it == owner_reservations_.end()) return 0;
  const std::vector<uint64_t> ids(it->second.begin(), it->second.end());
  for (uint64_t id : ids) AbortLocked(id);
  return ids.size();
}

void DevicePool::AbortLocked(uint64_t reservation_id) {
  auto it = reservations_.find(reservation_id);
  if (it == reservations_.end()) return;
  const Holder holder = it->second;
  reservations_.erase(it);
  auto owned = owner_reservations_.find(holder.owner);
  owned->second.erase(reservation_id);
  if (owned->second.empty()) owner_reservations_.erase(owned);
  reserved_pages_ -= holder.chunk->pages.size();
  FreePagesLocked(*holder.chunk);
  index_.erase(holder.chunk->key);
}

std::optional<PoolChunkRef> DevicePool::Acquire(const ChunkKey& key, uint64_t owner, PoolUse use) {
  absl::MutexLock lock(&mu_);
  const bool counted = use == PoolUse::kRequest;
  auto it = index_.find(key);
  if (it == index_.end() || it->second->state != State::kCommitted) {
    if (counted) ++counters_.misses;
    return std::nullopt;
  }
  Chunk* chunk = it->second.get();
  if (counted) ++counters_.hits;
  MakeUnevictableLocked(chunk);
  ++chunk->refs;
  const uint64_t id = next_id_++;
  refs_.emplace(id, Holder{chunk, owner});
  owner_refs_[owner].insert(id);
  return PoolChunkRef{.ref_id = id, .pages = chunk->pages, .positions = chunk->positions};
}

absl::Status DevicePool::Release(uint64_t ref_id) {
  absl::MutexLock lock(&mu_);
  if (!refs_.contains(ref_id)) {
    return absl::NotFoundError(fmt::format("device pool: no reference {}", ref_id));
  }
  ReleaseLocked(ref_id);
  return absl::OkStatus();
}

size_t DevicePool::ReleaseOwner(uint64_t owner) {
  absl::MutexLock lock(&mu_);
  auto it = owner_refs_.find(owner);
  if (it == owner_refs_.end()) return 0;
  const std::vector<uint64_t> ids(it->second.begin(), it->second.end());
  for (uint64_t id : ids) ReleaseLocked(id);
  return ids.size();
}

void DevicePool::ReleaseLocked(uint64_t ref_id) {
  auto it = refs_.find(ref_id);
  const Holder holder = it->second;
  refs_.erase(it);
  auto owned = owner_refs_.find(holder.owner);
  owned->second.erase(ref_id);
  if (owned->second.empty()) owner_refs_.erase(owned);
  Chunk* chunk = holder.chunk;
  if (--chunk->refs > 0) return;
  if (chunk->state == State::kCommitted) {
    // Released last is used most recently: the back of the list.
    MakeEvictableLocked(chunk);
    if (on_evictable_ && chunk->whole()) on_evictable_(*this, chunk->key, holder.owner);
    return;
  }
  pending_free_pages_ -= chunk->pages.size();
  FreePagesLocked(*chunk);
  removed_.erase(chunk);
}

size_t DevicePool::Lookup(std::span<const ChunkKey> chain) const {
  absl::MutexLock lock(&mu_);
  size_t found = 0;
  for (const ChunkKey& key : chain) {
    auto it = index_.find(key);
    if (it == index_.end() || it->second->state != State::kCommitted) break;
    ++found;
  }
  return found;
}

bool DevicePool::Remove(const ChunkKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end() || it->second->state != State::kCommitted) return false;
  ++counters_.removed;
  DetachLocked(it->second.get());
  return true;
}

void DevicePool::MakeEvictableLocked(Chunk* chunk) {
  if (chunk->evictable) return;
  chunk->evictable = true;
  chunk->lru_position = lru_.insert(lru_.end(), chunk);
  evictable_pages_ += chunk->pages.size();
}

void DevicePool::MakeUnevictableLocked(Chunk* chunk) {
  if (!chunk->evictable) return;
  chunk->evictable = false;
  lru_.erase(chunk->lru_position);
  evictable_pages_ -= chunk->pages.size();
}

void DevicePool::DetachLocked(Chunk* chunk) {
  MakeUnevictableLocked(chunk);
  committed_pages_ -= chunk->pages.size();
  auto it = index_.find(chunk->key);
  std::unique_ptr<Chunk> owned = std::move(it->second);
  index_.erase(it);
  if (chunk->refs == 0) {
    FreePagesLocked(*chunk);
    return;
  }
  chunk->state = State::kRemoved;
  pending_free_pages_ += chunk->pages.size();
  removed_.emplace(chunk, std::move(owned));
}

void DevicePool::FreePagesLocked(const Chunk& chunk) {
  // Reversed, so the chunk's first page is the next one handed out.
  free_pages_.insert(free_pages_.end(), chunk.pages.rbegin(), chunk.pages.rend());
}

DevicePoolStats DevicePool::Stats() const {
  absl::MutexLock lock(&mu_);
  DevicePoolStats stats = counters_;
  stats.free_pages = free_pages_.size();
  stats.committed_pages = committed_pages_;
  stats.reserved_pages = reserved_pages_;
  stats.pending_free_pages = pending_free_pages_;
  stats.referenced_pages = committed_pages_ - evictable_pages_;
  stats.chunks = index_.size() - reservations_.size();
  stats.reservations = reservations_.size();
  stats.references = refs_.size();
  return stats;
}

absl::Status DevicePool::CheckConsistency() const {
  absl::MutexLock lock(&mu_);
  std::vector<uint8_t> seen(geometry_.num_pages, 0);
  auto claim = [&](uint32_t page, std::string_view by) -> absl::Status {
    if (page >= geometry_.num_pages) {
      return absl::InternalError(fmt::format("device pool: page {} of {} out of range", page, by));
    }
    if (seen[page]++ != 0) {
      return absl::InternalError(fmt::format("device pool: page {} claimed twice ({})", page, by));
    }
    return absl::OkStatus();
  };
  for (uint32_t page : free_pages_) {
    if (absl::Status status = claim(page, "free list"); !status.ok()) return status;
  }
  uint64_t committed = 0, reserved = 0, pending = 0, evictable = 0, refs = 0;
  auto count = [&](const Chunk& chunk) -> absl::Status {
    for (uint32_t page : chunk.pages) {
      if (absl::Status status = claim(page, "a chunk"); !status.ok()) return status;
    }
    refs += chunk.refs;
    const uint64_t pages = chunk.pages.size();
    switch (chunk.state) {
      case State::kReserved:
        reserved += pages;
        break;
      case State::kCommitted:
        committed += pages;
        break;
      case State::kRemoved:
        pending += pages;
        break;
    }
    if (chunk.evictable) {
      if (chunk.state != State::kCommitted || chunk.refs != 0) {
        return absl::InternalError("device pool: an evictable chunk is referenced or uncommitted");
      }
      evictable += pages;
    } else if (chunk.state == State::kCommitted && chunk.refs == 0) {
      return absl::InternalError("device pool: an unreferenced committed chunk is not evictable");
    }
    return absl::OkStatus();
  };
  for (const auto& [key, chunk] : index_) {
    if (chunk->state == State::kRemoved) {
      return absl::InternalError("device pool: a removed chunk is in the index");
    }
    if (absl::Status status = count(*chunk); !status.ok()) return status;
  }
  for (const auto& [address, chunk] : removed_) {
    if (chunk->state != State::kRemoved || chunk->refs == 0) {
      return absl::InternalError("device pool: a removed chunk is not removed or unreferenced");
    }
    if (absl::Status status = count(*chunk); !status.ok()) return status;
  }
  if (std::count(seen.begin(), seen.end(), 0) != 0) {
    return absl::InternalError("device pool: a page is neither free nor a chunk's");
  }
  uint64_t in_lru = 0;
  for (const Chunk* chunk : lru_) in_lru += chunk->pages.size();
  if (committed != committed_pages_ || reserved != reserved_pages_ ||
      pending != pending_free_pages_ || evictable != evictable_pages_ || in_lru != evictable ||
      refs != refs_.size()) {
    return absl::InternalError(fmt::format(
        "device pool: counters (committed {}, reserved {}, pending {}, evictable {}, refs {}) "
        "do not match the chunks ({}, {}, {}, {}, {})",
        committed_pages_, reserved_pages_, pending_free_pages_, evictable_pages_, refs_.size(),
        committed, reserved, pending, evictable, refs));
  }
  return absl::OkStatus();
}

std::vector<PoolChunkRun> PoolChunkRuns(const KvLayout& layout, uint32_t block_tokens,
                                        const DevicePoolGeometry& geometry,
                                        std::span<const uint32_t> pages) {
  const auto tokens = static_cast<uint32_t>(pages.size() * block_tokens);
  const uint64_t page_plane_bytes = layout.plane_token_bytes() * block_tokens;
  std::vector<PoolChunkRun> runs;
  runs.reserve(size_t{layout.num_layers} * layout.planes_per_layer() * pages.size());
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    for (uint32_t plane = 0; plane < layout.planes_per_layer(); ++plane) {
      for (size_t i = 0; i < pages.size(); ++i) {
        runs.push_back(
            {.pool_offset = geometry.offset(layer, pages[i]) + plane * page_plane_bytes,
             .chunk_offset = layout.plane_offset(layer, plane, tokens) + i * page_plane_bytes,
             .bytes = page_plane_bytes});
      }
    }
  }
  return runs;
}

}  // namespace strata::storage
