// HostTier::CheckConsistency: walks every structure of the tier and checks its invariants (for
// tests and debugging).
#include "storage/host/host_tier.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "storage/host/internal/chunk_record.h"
#include "storage/host/internal/host_tier_inline.h"

namespace strata::storage {
namespace {

using internal_host::ChunkState;
using internal_host::kNumShards;
using internal_host::PagesOf;

}  // namespace

absl::Status HostTier::CheckConsistency() const {
  absl::MutexLock lock(&mu_);
  auto fail = [](std::string message) {
    return absl::InternalError("host tier consistency: " + message);
  };
  std::vector<Extent> extents = allocator_.FreeRunsForTesting();
  uint64_t chunks = 0, payload = 0, committed_pages = 0, unevictable_pages = 0, hard_pinned = 0;
  uint64_t reservations = 0, reserved = 0;
  uint64_t encoded = 0, encoded_bytes = 0, encoded_decoded = 0;
  absl::flat_hash_map<const Record*, uint32_t> leases;
  for (const auto& [id, handle] : handles_) {
    if (handle.is_lease) ++leases[handle.record];
  }
  auto check_record = [&](const Record* record) -> absl::Status {
    const uint32_t pages = PagesOf(*record);
    if (!record->extents.empty() && pages != PagesFor(record->size_bytes)) {
      return fail(fmt::format("chunk {} holds {} pages for {} bytes", record->key.ToString(), pages,
                              record->size_bytes));
    }
    const auto it = leases.find(record);
    const uint32_t handle_leases = it == leases.end() ? 0 : it->second;
    if (handle_leases != record->leases) {
      return fail(fmt::format("chunk {} has {} lease handles but counts {}", record->key.ToString(),
                              handle_leases, record->leases));
    }
    extents.insert(extents.end(), record->extents.begin(), record->extents.end());
    return absl::OkStatus();
  };
  for (size_t i = 0; i < kNumShards; ++i) {
    absl::ReaderMutexLock shard_lock(&shards_[i].mu);
    for (const Record* record : shards_[i].records) {
      if (&ShardFor(record->key) != &shards_[i]) return fail("chunk in the wrong shard");
      if (record->state == ChunkState::kCommitted) {
        ++chunks;
        payload += record->size_bytes;
        committed_pages += PagesOf(*record);
        if (record->unevictable) unevictable_pages += PagesOf(*record);
        if (record->hard_pinned) hard_pinned += record->size_bytes;
        if (record->encoded) {
          const auto form = encodings_.find(record);
          if (form == encodings_.end() || !form->second.encoded()) {
            return fail(fmt::format("encoded chunk {} has no form", record->key.ToString()));
          }
          ++encoded;
          encoded_bytes += record->size_bytes;
          encoded_decoded += form->second.decoded_bytes;
        }
      } else if (record->state == ChunkState::kReserved) {
        if (!record->extents.empty()) {
          ++reservations;
          reserved += record->size_bytes;
        }
      } else {
        return fail(fmt::format("dropped chunk {} still indexed", record->key.ToString()));
      }
      STRATA_RETURN_IF_ERROR(check_record(record));
    }
  }
  for (const Record* record : detached_) {
    if (record->state == ChunkState::kCommitted || record->state == ChunkState::kReserved) {
      return fail("indexed chunk in the detached set");
    }
    STRATA_RETURN_IF_ERROR(check_record(record));
  }
  for (const auto& [call, held] : replacing_)
    extents.insert(extents.end(), held.begin(), held.end());
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.first_page < b.first_page; });
  uint64_t next_page = 0;
  for (const Extent& extent : extents) {
    if (extent.first_page != next_page) {
      return fail(fmt::format("page {} is {}", std::min<uint64_t>(extent.first_page, next_page),
                              extent.first_page > next_page ? "lost (neither free nor held)"
                                                            : "both free and held, or held twice"));
    }
    next_page = extent.end_page();
  }
  if (next_page != allocator_.num_pages()) {
    return fail(fmt::format("pages {}..{} are lost", next_page, allocator_.num_pages()));
  }
  if (chunks != chunks_ || payload != payload_bytes_ || committed_pages != committed_pages_ ||
      unevictable_pages != unevictable_pages_ || hard_pinned != hard_pinned_bytes_) {
    return fail(fmt::format(
        "committed chunks: counted {} chunks / {} bytes / {} pages / {} unevictable pages / {} "
        "hard-pinned bytes, tracked {} / {} / {} / {} / {}",
        chunks, payload, committed_pages, unevictable_pages, hard_pinned, chunks_, payload_bytes_,
        committed_pages_, unevictable_pages_, hard_pinned_bytes_));
  }
  if (encoded != encodings_.size() || encoded_bytes != encoded_bytes_ ||
      encoded_decoded != encoded_decoded_bytes_) {
    return fail(fmt::format(
        "encoded chunks: counted {} / {} bytes / {} decoded, tracked {} / {} / {}", encoded,
        encoded_bytes, encoded_decoded, encodings_.size(), encoded_bytes_, encoded_decoded_bytes_));
  }
  if (reservations != reservations_ || reserved != reserved_bytes_) {
    return fail(fmt::format("reservations: counted {} / {} bytes, tracked {} / {}", reservations,
                            reserved, reservations_, reserved_bytes_));
  }
  if (by_seq_.size() != chunks_) {
    return fail(fmt::format("{} chunks in commit order, {} committed", by_seq_.size(), chunks_));
  }
  if (policy_->size() != chunks_) {
    return fail(fmt::format("policy tracks {} chunks, index holds {}", policy_->size(), chunks_));
  }
  uint64_t lease_handles = 0;
  for (const auto& [record, count] : leases) lease_handles += count;
  if (lease_handles != active_leases_) {
    return fail(fmt::format("{} lease handles, {} counted", lease_handles, active_leases_));
  }
  if (handles_.size() - lease_handles != reservations_) {
    return fail(fmt::format("{} reservation handles, {} counted", handles_.size() - lease_handles,
                            reservations_));
  }
  return absl::OkStatus();
}

}  // namespace strata::storage
