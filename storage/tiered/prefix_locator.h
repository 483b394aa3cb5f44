// Where the leading chunks of a prefix chain live when the host tier spills to tiers below it: a
// prefix may go on in any of them (a chunk evicted to disk, its successor still in the host
// tier, the one after it on a peer). Not a snapshot: chunks may move while it runs, so a later
// load may still miss.
#pragma once

#include <span>
#include <vector>

#include "core/chunk_key.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/demoter.h"
#include "storage/tiered/lower_tier.h"
#include "storage/tiered/tier.h"

namespace strata::storage {

// The tiers below the host tier, top down: the first is the nearest (the demotion target).
using LowerTiers = std::span<LowerTier* const>;

// Whether `tier` (one of `lower`) holds `key`: in its index, or, for the nearest tier, staged
// (nullable) for its write there. In memory only.
bool HeldBy(LowerTiers lower, const Demoter* staged, const LowerTier& tier, const ChunkKey& key);

// The nearest tier of `lower` that holds `key` (HeldBy), or null. A chunk `staged` (nullable) holds
// for its write to the nearest tier counts as held there (PromoteChunk serves it from the staging
// buffer). In memory only.
LowerTier* FindBelow(LowerTiers lower, const Demoter* staged, const ChunkKey& key);

// The tier of each leading chunk of `chain`: the host tier when it holds the chunk, else the
// nearest lower tier that does (FindBelow); stops at the first chunk in no tier. With no lower
// tiers, the host tier's prefix alone.
std::vector<Tier> LocatePrefix(const HostTier& host, LowerTiers lower,
                               std::span<const ChunkKey> chain, const Demoter* staged = nullptr);

}  // namespace strata::storage
