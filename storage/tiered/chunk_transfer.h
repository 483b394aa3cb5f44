// Movement of single chunks between the host tier (T1) and a tier below it (LowerTier: the disk
// tier, T2).
//
// Demotion on eviction is Demoter's (demoter.h). PutPayload writes a host payload to the tier
// below; arena pages are 4 KiB aligned, so the disk tier's write reads them in place (no copy).
//
// CopyDown writes a host chunk to the tier below on request (Move, Drain).
//
// PromoteChunk copies a chunk from the tier below into the host tier: it reserves the chunk in
// the host tier, reads the chunk straight into the reserved arena pages (no bounce copy for
// page-aligned extents) and commits it. Thread-safe; call it from any thread but never from
// inside an EvictionListener callback (it reserves in the host tier).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/demoter.h"
#include "storage/tiered/lower_tier.h"

namespace strata::storage {

// The payload's byte ranges (host arena pages), as the disk tier's parts.
absl::InlinedVector<std::span<const std::byte>, 4> PayloadParts(const PayloadView& payload);

// Puts `payload` (host arena pages, read during the call), stored under `tenant` in the host
// tier, on `below` under `key`; LowerTier::PutBatch's result.
absl::Status PutPayload(LowerTier& below, const ChunkKey& key, const PayloadView& payload,
                        uint64_t checksum, uint32_t num_tokens, std::string_view tenant);

enum class PromoteOutcome {
  kPromoted,       // the chunk is committed in the host tier now
  kNotBelow,       // a miss in the tier below
  kAlreadyInHost,  // committed in the host tier already: nothing read
  kInProgress,     // another writer holds a host reservation for the key
};

// Writes the host tier's copy of `key` to `below` under a copy lease (HostTier::AcquireForCopy:
// not counted as a load); the host copy stays. false when the host tier does not hold `key`. The
// record carries the checksum the host tier committed, so a host copy corrupted in memory is
// caught by the disk tier's Read (kDataLoss), never served. A chunk the host tier holds encoded
// is written as it decodes (WithChunkBytes, with `layouts`: kDataLoss when it does not). The
// disk tier's Put errors.
absl::StatusOr<bool> CopyDown(HostTier& host, LowerTier& below, const ChunkKey& key,
                              const KnownLayouts& layouts);

// Promotes `key` (a key of `layout`) from `below` into `host`. kInvalidArgument when the disk
// record's size does not match layout.chunk_bytes(num_tokens); the host tier's Reserve errors
// (kResourceExhausted, ...); the disk tier's Read errors (kDataLoss: the disk copy was dropped;
// kAborted: it left the disk tier meanwhile). On any error the host reservation is aborted.
// A chunk `staged` (nullable) holds for its disk write is promoted from its staging buffer
// instead (a memcpy, no disk read), with the checksum the host tier gave it. The host tier
// records the chunk under the tenant `below` recorded (LowerTier::records_tenants) or the
// staging buffer names (its ReserveOptions::tenant_name), accounted under no tenant's quota.
absl::StatusOr<PromoteOutcome> PromoteChunk(LowerTier& below, HostTier& host,
                                            const KvLayout& layout, const ChunkKey& key,
                                            const Demoter* staged = nullptr);

// Promotes every chunk of `keys` as PromoteChunk does each, returning one result per key in
// order. The chunks are reserved in the host tier first and then read with one queue of disk
// requests (LowerTier::ReadBatch), so the device does not idle between chunks; a caller bounds
// the run, since its reservations are held together.
std::vector<absl::StatusOr<PromoteOutcome>> PromoteRun(LowerTier& below, HostTier& host,
                                                       const KvLayout& layout,
                                                       std::span<const ChunkKey> keys,
                                                       const Demoter* staged = nullptr);

// PromoteRun without a layout: each chunk is reserved at the size and token count `below` (or
// `staged`) recorded when it was stored, which was checked against its layout then. For
// promotions whose caller knows no layout (a peer asking for a chunk held only on disk).
std::vector<absl::StatusOr<PromoteOutcome>> PromoteRunAsRecorded(LowerTier& below, HostTier& host,
                                                                 std::span<const ChunkKey> keys,
                                                                 const Demoter* staged = nullptr);

}  // namespace strata::storage
