// A host tier of four small chunks over a disk tier, for tests of the movement between them
// (demotion, promotion, prefetch, write-through).
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "core/clock.h"
#include "storage/disk/testing/disk_tier_test_util.h"
#include "storage/host/chunk_observer.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/demoter.h"
#include "storage/tiered/disk_lower_tier.h"

namespace strata::storage::testing {

// Chunk `id` holds Pattern(id) and has SyntheticKey(layout, id). Evictions go to a Demoter
// (synchronous by default).
class HostOverDisk {
 public:
  static constexpr uint64_t kChunkBytes = 4096;  // SmallLayout: 16 tokens x 256 bytes

  explicit HostOverDisk(DiskTier* disk, DemoterOptions options = {.max_queued_bytes = 0})
      : disk(disk), below(disk), mover(Demoter::Create(&below, options).value()) {}

  // Creates the host tier, telling `observer` (nullable) about its index and reading `clock`.
  absl::Status Open(ChunkObserver* observer = nullptr, Clock* clock = SystemClock::Get()) {
    auto host = HostTier::Create({.capacity_bytes = 4 * kChunkBytes,
                                  .page_bytes = 4096,
                                  .arena_name = "strata-host-over-disk-test",
                                  .clock = clock,
                                  .listener = mover.get(),
                                  .observer = observer});
    if (!host.ok()) return host.status();
    tier = std::move(host).value();
    return absl::OkStatus();
  }

  ChunkKey Key(uint64_t id) const { return SyntheticKey(layout, id); }

  absl::Status Store(uint64_t id) {
    auto reserved = tier->Reserve(layout, Key(id), {.num_tokens = 16});
    if (!reserved.ok()) return reserved.status();
    reserved->reservation.payload().CopyFrom(Pattern(id, kChunkBytes));
    return tier->Commit(std::move(reserved->reservation));
  }

  // True when the host tier holds chunk `id` byte-exact (a load: counted as a hit).
  bool HostHolds(uint64_t id) {
    auto lease = tier->Acquire(Key(id));
    if (!lease.ok() || !lease->has_value()) return false;
    std::vector<std::byte> bytes(kChunkBytes);
    (*lease)->payload().CopyTo(bytes);
    return bytes == Pattern(id, kChunkBytes);
  }

  // True when the disk tier holds chunk `id` byte-exact.
  bool DiskHolds(uint64_t id) const {
    AlignedBuffer bytes(kChunkBytes);
    return disk->Read(Key(id), bytes.span()).ok() &&
           std::memcmp(bytes.data(), Pattern(id, kChunkBytes).data(), kChunkBytes) == 0;
  }

  DiskTier* const disk;
  DiskLowerTier below;  // the disk tier as the store's movers see it
  KvLayout layout = SmallLayout();
  std::unique_ptr<Demoter> mover;
  std::unique_ptr<HostTier> tier;
};

}  // namespace strata::storage::testing
