// The KV events the cluster index is built from (DESIGN.md section 7: ChunkStored / ChunkRemoved
// / Cleared per tier), as plain values that carry no protobuf type. One instance's daemon sends
// them in the order its tiers changed; the controller's gRPC adapter converts each to a ChunkEvent
// and hands a batch of one instance's events to ClusterIndex::Ingest. Plain values;
// thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/chunk_key.h"

namespace strata::controller {

// Where an instance holds a chunk, fastest first: the device pool, the host tier, the disk tier,
// remote peers (T0 to T3 of DESIGN.md section 4). The same order as storage::Tier
// (storage/tiered/tier.h), which lives in strata_tiered with RocksDB and io_uring behind it: the
// controller does not link the daemon's storage, so it names the tiers itself and the adapter maps
// one onto the other.
enum class Tier : uint8_t { kDevice, kHost, kDisk, kRemote };
inline constexpr size_t kTierCount = 4;  // for arrays indexed by Tier

enum class ChunkEventKind : uint8_t {
  kStored,   // `key` is now in `tier` of the instance (possibly in other tiers too)
  kRemoved,  // `key` is no longer in `tier` of the instance (its other tiers are kept)
  kCleared,  // every chunk of the instance is gone, in every tier; `key` and `tier` are unused
};

struct ChunkEvent {
  ChunkEventKind kind = ChunkEventKind::kStored;
  Tier tier = Tier::kHost;
  ChunkKey key;
};

}  // namespace strata::controller
