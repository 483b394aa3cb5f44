// Pairs a chunk's pieces on a peer (arena ranges there) with its pieces here (spans of our
// arena), splitting where either side's pieces end, into the Segments one Transport::Read
// moves. Internal to storage/remote; pure, thread-safe.
#pragma once

#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/remote/remote_messages.h"
#include "storage/remote/transport.h"

namespace strata::storage::remote::internal {

// kDataLoss when the two sides do not add up to the same number of bytes.
absl::StatusOr<std::vector<Segment>> PairPieces(std::span<const RemoteRange> remote,
                                                std::span<const std::span<std::byte>> local);

}  // namespace strata::storage::remote::internal
