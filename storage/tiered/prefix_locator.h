// Where the leading chunks of a prefix chain live when the host tier spills to a disk tier: a
// prefix may go on in either tier (a chunk evicted to disk, its successor still in the host
// tier). Not a snapshot: chunks may move while it runs, so a later load may still miss.
#pragma once

#include <span>
#include <vector>

#include "core/chunk_key.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/demoter.h"
#include "storage/tiered/lower_tier.h"
#include "storage/tiered/tier.h"

namespace strata::storage {

// Whether the tier below holds `key`, or `staged` (nullable) holds it for its write there; false
// when `below` is null. In memory only.
bool HeldBelow(const LowerTier* below, const Demoter* staged, const ChunkKey& key);

// The tier of each leading chunk of `chain`, stopping at the first chunk in neither. `disk` is
// nullable (no disk tier: the host tier's prefix alone). A chunk `staged` holds for its disk
// write counts as Tier::kDisk (PromoteChunk serves it from the staging buffer); `staged` is
// nullable.
std::vector<Tier> LocatePrefix(const HostTier& host, const LowerTier* disk,
                               std::span<const ChunkKey> chain, const Demoter* staged = nullptr);

}  // namespace strata::storage
