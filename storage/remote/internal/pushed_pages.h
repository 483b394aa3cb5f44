// Host-tier pages for a chunk a peer hands over: RemoteServer's Push and LayerStreamReceiver's
// Open reserve them alike. Internal to storage/remote; thread-safe as HostTier is.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/host/host_tier.h"
#include "storage/remote/remote_messages.h"

namespace strata::storage::remote::internal {

struct PushedPages {
  WriteReservation reservation;
  std::vector<std::span<std::byte>> parts;  // the reservation's pages, in payload order
};

// Reserves pages for chunk `key` of `layout` as the peer describes it. kInvalidArgument when its
// tokens or size do not match the layout; kAlreadyExists when the host tier holds it; kAborted
// when another writer is storing it; the tier's errors (kResourceExhausted: no room).
absl::StatusOr<PushedPages> ReservePushed(HostTier& host, const KvLayout& layout,
                                          const ChunkKey& key, const RemoteChunk& chunk);

}  // namespace strata::storage::remote::internal
