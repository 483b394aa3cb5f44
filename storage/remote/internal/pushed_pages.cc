#include "storage/remote/internal/pushed_pages.h"

#include <utility>

#include "storage/host/payload_view.h"

namespace strata::storage::remote::internal {

absl::StatusOr<PushedPages> ReservePushed(HostTier& host, const KvLayout& layout,
                                          const ChunkKey& key, const RemoteChunk& chunk) {
  const uint32_t tokens = chunk.num_tokens;
  if (tokens == 0 || tokens > layout.chunk_tokens ||
      chunk.payload_bytes != layout.chunk_bytes(tokens)) {
    return absl::InvalidArgumentError("size does not match the layout");
  }
  absl::StatusOr<ReserveResult> reserved = host.Reserve(layout, key, {.num_tokens = tokens});
  if (!reserved.ok()) return reserved.status();
  if (reserved->outcome == ReserveOutcome::kAlreadyPresent) {
    return absl::AlreadyExistsError("held already");
  }
  if (reserved->outcome != ReserveOutcome::kReserved) {
    return absl::AbortedError("another writer is storing it");
  }
  PushedPages pages{.reservation = std::move(reserved->reservation)};
  const MutablePayloadView payload = pages.reservation.payload();
  for (size_t r = 0; r < payload.ranges().size(); ++r)
    pages.parts.push_back(payload.range_bytes(r));
  return pages;
}

}  // namespace strata::storage::remote::internal
