#include "strata/page_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <utility>

#include "connector/src/engine_client.h"
#include "connector/src/log.h"
#include "core/fmt_absl.h"
#include "core/xxh3_dispatch.h"
#include "fmt/format.h"

namespace strata::connector {
namespace {

using internal::ArenaExtent;
using internal::ArenaMapping;
using internal::EngineClient;
using internal::EngineClientOptions;
using internal::LoadPlacement;
using internal::StoreDisposition;
using internal::StoreItem;
using internal::StorePlacement;

// Domain tag of page keys: no other producer of keys hashes it, so page keys never equal
// KeyHasher's (which hash "strata.prefix.v1" / "strata.pic.v1" or SHA-256 over CBOR).
constexpr std::string_view kPageKeyTag = "strata.sglang.page.v1";

uint64_t PageBytes(const std::span<const HostSegment> segments) {
  uint64_t total = 0;
  for (const HostSegment& s : segments) total += s.size_bytes;
  return total;
}

bool ExtentsInside(const ArenaMapping& arena, std::span<const ArenaExtent> extents,
                   uint64_t expected_bytes) {
  uint64_t total = 0;
  for (const ArenaExtent& e : extents) {
    if (!arena.Contains(e.offset, e.length)) return false;
    total += e.length;
  }
  return total == expected_bytes;
}

enum class Direction { kHostToArena, kArenaToHost };

// Copies between a page's host segments and its arena extents (equal total sizes, checked by the
// caller) and returns xxh3-64 of the bytes as they lie at the destination, read back piece by
// piece right after each copy (while still in cache): a store commits the checksum of what the
// arena holds, a load checks what the caller will be served.
uint64_t CopyAndDigest(const ArenaMapping& arena, std::span<const ArenaExtent> extents,
                       std::span<const HostSegment> segments, Direction direction) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  size_t e = 0;
  size_t s = 0;
  uint64_t e_done = 0;
  uint64_t s_done = 0;
  while (e < extents.size() && s < segments.size()) {
    const uint64_t e_left = extents[e].length - e_done;
    const uint64_t s_left = segments[s].size_bytes - s_done;
    const uint64_t n = std::min(e_left, s_left);
    if (n > 0) {
      std::byte* arena_bytes = arena.base() + extents[e].offset + e_done;
      std::byte* host_bytes = segments[s].data + s_done;
      if (direction == Direction::kHostToArena) {
        std::memcpy(arena_bytes, host_bytes, n);
        XXH3_64bits_update(&state, arena_bytes, n);
      } else {
        std::memcpy(host_bytes, arena_bytes, n);
        XXH3_64bits_update(&state, host_bytes, n);
      }
    }
    e_done += n;
    s_done += n;
    if (e_done == extents[e].length) {
      ++e;
      e_done = 0;
    }
    if (s_done == segments[s].size_bytes) {
      ++s;
      s_done = 0;
    }
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace

struct PageStore::Counters {
  std::atomic<uint64_t> lookups{0};
  std::atomic<uint64_t> lookup_failures{0};
  std::atomic<uint64_t> pages_stored{0};
  std::atomic<uint64_t> pages_already_present{0};
  std::atomic<uint64_t> pages_store_failed{0};
  std::atomic<uint64_t> pages_loaded{0};
  std::atomic<uint64_t> pages_missing{0};
  std::atomic<uint64_t> pages_corrupt{0};
  std::atomic<uint64_t> bytes_stored{0};
  std::atomic<uint64_t> bytes_loaded{0};
};

absl::Status PageStoreOptions::Validate() const {
  if (socket_path.empty()) return absl::InvalidArgumentError("page store: socket_path is empty");
  if (absl::Status s = layout.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(fmt::format("page store: layout: {}", s.message()));
  }
  if (io_timeout.count() <= 0) return absl::InvalidArgumentError("page store: io_timeout <= 0");
  if (lookup_budget.count() <= 0) {
    return absl::InvalidArgumentError("page store: lookup_budget <= 0");
  }
  if (reconnect_min_backoff.count() < 0 || reconnect_max_backoff < reconnect_min_backoff) {
    return absl::InvalidArgumentError(
        "page store: reconnect backoffs must satisfy 0 <= min <= max");
  }
  if (clock == nullptr) return absl::InvalidArgumentError("page store: clock is null");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PageStore>> PageStore::Create(const PageStoreOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  EngineClientOptions client_options = internal::SessionOptions(options, /*map_arena=*/true);
  absl::StatusOr<std::unique_ptr<EngineClient>> client =
      EngineClient::Create(std::move(client_options));
  if (!client.ok()) return client.status();
  return std::unique_ptr<PageStore>(new PageStore(options, std::move(*client)));
}

PageStore::PageStore(const PageStoreOptions& options, std::unique_ptr<EngineClient> client)
    : options_(options),
      fingerprint_(options.layout.Fingerprint()),
      page_bytes_(options.layout.chunk_bytes(options.layout.chunk_tokens)),
      client_(std::move(client)),
      counters_(std::make_unique<Counters>()) {}

PageStore::~PageStore() = default;

ChunkKey PageStore::KeyOf(std::string_view key) const {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  XXH3_128bits_update(&state, kPageKeyTag.data(), kPageKeyTag.size());
  std::array<uint8_t, 8> fingerprint;
  for (size_t i = 0; i < fingerprint.size(); ++i) {
    fingerprint[i] = static_cast<uint8_t>(fingerprint_ >> (8 * i));
  }
  XXH3_128bits_update(&state, fingerprint.data(), fingerprint.size());
  const uint64_t length = key.size();
  std::array<uint8_t, 8> length_bytes;
  for (size_t i = 0; i < length_bytes.size(); ++i) {
    length_bytes[i] = static_cast<uint8_t>(length >> (8 * i));
  }
  XXH3_128bits_update(&state, length_bytes.data(), length_bytes.size());
  XXH3_128bits_update(&state, key.data(), key.size());
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(&state));
  return ChunkKey::FromParts(HashAlgorithm::kXxh3_128, KeyNamespace::kPrefix, fingerprint_,
                             std::span<const uint8_t>(canonical.digest, sizeof(canonical.digest)));
}

absl::StatusOr<size_t> PageStore::Exists(std::span<const std::string> keys) {
  if (keys.empty()) return size_t{0};
  std::vector<ChunkKey> chunk_keys;
  chunk_keys.reserve(keys.size());
  for (const std::string& key : keys) chunk_keys.push_back(KeyOf(key));
  absl::StatusOr<internal::LookupHit> hit =
      client_->LookupChain(chunk_keys, options_.lookup_budget);
  if (!hit.ok()) {
    counters_->lookup_failures.fetch_add(1, std::memory_order_relaxed);
    return hit.status();
  }
  counters_->lookups.fetch_add(1, std::memory_order_relaxed);
  return std::min<size_t>(hit->chunks, keys.size());
}

absl::StatusOr<std::vector<bool>> PageStore::Put(std::span<const std::string> keys,
                                                 std::span<const HostPage> pages) {
  if (keys.size() != pages.size()) {
    return absl::InvalidArgumentError(
        fmt::format("page store: {} keys for {} pages", keys.size(), pages.size()));
  }
  std::vector<bool> stored(keys.size(), false);
  // Pages of the wrong size are not sent.
  std::vector<size_t> sent;
  std::vector<StoreItem> items;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (PageBytes(pages[i].segments) != page_bytes_) {
      counters_->pages_store_failed.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    sent.push_back(i);
    StoreItem& item = items.emplace_back();
    item.key = KeyOf(keys[i]);
    item.num_tokens = options_.layout.chunk_tokens;
  }
  if (items.empty()) return stored;

  auto placed = client_->PrepareStore(items, options_.io_timeout);
  if (!placed.ok()) {
    counters_->pages_store_failed.fetch_add(items.size(), std::memory_order_relaxed);
    return placed.status();
  }
  const std::vector<StorePlacement>& placements = placed->value;
  std::vector<uint64_t> handles;
  std::vector<uint64_t> checksums;
  std::vector<size_t> committing;  // page index of each handle
  std::vector<uint64_t> to_abort;
  for (size_t k = 0; k < sent.size(); ++k) {
    const size_t i = sent[k];
    if (k >= placements.size() || !placements[k].status.ok()) {
      counters_->pages_store_failed.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const StorePlacement& p = placements[k];
    if (p.disposition != StoreDisposition::kReserved) {
      // Already present, or another writer is storing the same key (the same bytes).
      stored[i] = true;
      counters_->pages_already_present.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (placed->arena == nullptr || !ExtentsInside(*placed->arena, p.extents, page_bytes_)) {
      to_abort.push_back(p.handle);
      counters_->pages_store_failed.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    checksums.push_back(
        CopyAndDigest(*placed->arena, p.extents, pages[i].segments, Direction::kHostToArena));
    handles.push_back(p.handle);
    committing.push_back(i);
  }
  if (!to_abort.empty()) (void)client_->Abort(placed->generation, to_abort, options_.io_timeout);
  if (handles.empty()) return stored;
  auto committed = client_->Commit(placed->generation, handles, options_.io_timeout, checksums);
  for (size_t k = 0; k < handles.size(); ++k) {
    if (committed.ok() && k < committed->size() && (*committed)[k].ok()) {
      stored[committing[k]] = true;
      counters_->pages_stored.fetch_add(1, std::memory_order_relaxed);
      counters_->bytes_stored.fetch_add(page_bytes_, std::memory_order_relaxed);
    } else {
      counters_->pages_store_failed.fetch_add(1, std::memory_order_relaxed);
    }
  }
  return stored;
}

absl::StatusOr<std::vector<bool>> PageStore::Get(std::span<const std::string> keys,
                                                 std::span<const HostPage> pages) {
  if (keys.size() != pages.size()) {
    return absl::InvalidArgumentError(
        fmt::format("page store: {} keys for {} pages", keys.size(), pages.size()));
  }
  std::vector<bool> found(keys.size(), false);
  if (keys.empty()) return found;
  // Only the leading pages with the right size are asked for: the run ends at the first other.
  std::vector<ChunkKey> chunk_keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (PageBytes(pages[i].segments) != page_bytes_) break;
    chunk_keys.push_back(KeyOf(keys[i]));
  }
  if (chunk_keys.empty()) {
    counters_->pages_missing.fetch_add(keys.size(), std::memory_order_relaxed);
    return found;
  }
  auto leased = client_->PrepareLoad(chunk_keys, options_.lease_ms, options_.io_timeout,
                                     /*verifies=*/true);
  if (!leased.ok()) {
    counters_->pages_missing.fetch_add(keys.size(), std::memory_order_relaxed);
    return leased.status();
  }
  const std::vector<LoadPlacement>& placements = leased->value;
  std::vector<uint64_t> handles;
  // (handle index, page index) of each page copied and verified, in order.
  std::vector<std::pair<size_t, size_t>> served;
  bool run = true;
  for (size_t i = 0; i < chunk_keys.size() && i < placements.size(); ++i) {
    const LoadPlacement& p = placements[i];
    if (!p.status.ok()) {
      run = false;
      continue;
    }
    handles.push_back(p.handle);
    if (!run) continue;
    if (leased->arena == nullptr || p.size_bytes != page_bytes_ ||
        !ExtentsInside(*leased->arena, p.extents, page_bytes_)) {
      run = false;
      continue;
    }
    const uint64_t digest =
        CopyAndDigest(*leased->arena, p.extents, pages[i].segments, Direction::kArenaToHost);
    if (digest != p.checksum) {
      counters_->pages_corrupt.fetch_add(1, std::memory_order_relaxed);
      Log().warn("page store: page {} ({}) failed its checksum; reported missing", keys[i],
                 chunk_keys[i].ToString());
      run = false;
      continue;
    }
    found[i] = true;
    served.emplace_back(handles.size() - 1, i);
  }
  if (!handles.empty()) {
    auto released = client_->Release(leased->generation, handles, options_.io_timeout);
    // A page whose release was not clean ends the run there.
    for (size_t k = 0; k < served.size(); ++k) {
      const size_t h = served[k].first;
      if (!released.ok() || h >= released->size() || !(*released)[h].ok()) {
        for (size_t j = k; j < served.size(); ++j) found[served[j].second] = false;
        break;
      }
    }
  }
  size_t loaded = 0;
  for (bool f : found) loaded += f ? 1 : 0;
  counters_->pages_loaded.fetch_add(loaded, std::memory_order_relaxed);
  counters_->bytes_loaded.fetch_add(loaded * page_bytes_, std::memory_order_relaxed);
  counters_->pages_missing.fetch_add(keys.size() - loaded, std::memory_order_relaxed);
  return found;
}

PageStoreStats PageStore::Stats() const {
  PageStoreStats s;
  s.lookups = counters_->lookups.load(std::memory_order_relaxed);
  s.lookup_failures = counters_->lookup_failures.load(std::memory_order_relaxed);
  s.pages_stored = counters_->pages_stored.load(std::memory_order_relaxed);
  s.pages_already_present = counters_->pages_already_present.load(std::memory_order_relaxed);
  s.pages_store_failed = counters_->pages_store_failed.load(std::memory_order_relaxed);
  s.pages_loaded = counters_->pages_loaded.load(std::memory_order_relaxed);
  s.pages_missing = counters_->pages_missing.load(std::memory_order_relaxed);
  s.pages_corrupt = counters_->pages_corrupt.load(std::memory_order_relaxed);
  s.bytes_stored = counters_->bytes_stored.load(std::memory_order_relaxed);
  s.bytes_loaded = counters_->bytes_loaded.load(std::memory_order_relaxed);
  s.connected = client_->connected();
  return s;
}

}  // namespace strata::connector
