// The vocabulary the tiered store speaks to its callers: which tier a chunk is in, and what each
// tier and the movement between tiers report. Plain values; no tier's types leak through them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strata::storage {

// Top down, T0 to T3: the device pool, the host tier, the disk tier, remote peers. A store has the
// host tier and those below it it was given (TieredStore::has).
enum class Tier { kDevice, kHost, kDisk, kRemote };
inline constexpr size_t kTierCount = 4;  // for arrays indexed by Tier

// "device", "host", "disk", "remote": the {tier="..."} label of metrics and the CLI's name.
std::string_view TierName(Tier tier);

// What a tier below the host tier reports.
struct LowerTierStats {
  Tier tier = Tier::kDisk;
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;     // what the tier takes of its capacity
  uint64_t payload_bytes = 0;  // of the chunks as the host tier holds them (decoded)
  uint64_t stored_bytes = 0;   // the same payloads as the tier stores them (encoded or not)
  uint64_t encoded_chunks = 0;
  uint64_t chunks = 0;
  uint64_t reads = 0;  // chunks read (promotions)
  uint64_t read_bytes = 0;
  uint64_t writes = 0;  // chunks written (demotions, write-through, moves)
  uint64_t written_bytes = 0;
  uint64_t evictions = 0;          // for capacity
  uint64_t corrupt_evictions = 0;  // records dropped as torn or corrupt
  uint64_t checksum_failures = 0;
  uint64_t io_errors = 0;
};

// Chunks moved between tiers, by what moved them.
struct MovementStats {
  // Host evictions written to the tier below, and those whose write failed (the copy is lost).
  uint64_t demoted = 0;
  uint64_t demotion_failures = 0;
  // Prefetch promotions by outcome (skipped: in the host tier already, gone from below, or
  // another writer's); queued: ever queued.
  uint64_t prefetch_queued = 0;
  uint64_t prefetch_promoted = 0;
  uint64_t prefetch_skipped = 0;
  uint64_t prefetch_failed = 0;
  // Loads that went on asynchronously past a host miss, and the chunks they promoted.
  uint64_t async_loads = 0;
  uint64_t load_promoted = 0;
  std::array<uint64_t, kTierCount> load_promoted_from{};  // of those, by the tier they came from
  // Host chunks stored encoded (Compress) that loads (or peers' leases) decoded back in place
  // before leasing them.
  uint64_t load_decoded = 0;
  // Host chunks stored encoded that loads leased as they are, to readers that decode them
  // (LoadOptions::reader_decodes).
  uint64_t load_encoded = 0;
  // [host] codec: committed chunks compressed in place, and those left as they were (busy:
  // engines read them throughout; skipped: gone, of no known layout, not smaller, or of a
  // tenant whose choice is none; failed; dropped: the queue was full). All 0 when it is off.
  uint64_t host_compressed = 0;
  uint64_t host_compress_busy = 0;
  uint64_t host_compress_skipped = 0;
  uint64_t host_compress_failed = 0;
  uint64_t host_compress_dropped = 0;
  // Chunks promoted for peers that asked for chunks held only below the host tier.
  uint64_t peer_promoted = 0;
  // Write-through by outcome; all 0 when write-through is off (write_through false).
  bool write_through = false;
  uint64_t write_through_written = 0;
  uint64_t write_through_skipped = 0;
  uint64_t write_through_dropped = 0;
  uint64_t write_through_failed = 0;
  uint64_t write_through_cancelled = 0;
};

}  // namespace strata::storage
