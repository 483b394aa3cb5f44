// Conversions between the control API's types (proto/strata/v1/control.proto) and the cluster
// index's (chunk_event.h): a daemon's WatchEvents stream and columnar ListChunks pages into the
// index's events, and tiers both ways. Pure functions; thread-safe.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "controller/index/chunk_event.h"
#include "strata/v1/control.pb.h"

namespace strata::controller {

// kInvalidArgument for TIER_UNSPECIFIED and values this controller does not know.
absl::StatusOr<Tier> TierFromProto(v1::Tier tier);
v1::Tier TierToProto(Tier tier);

// One event of a WatchEvents stream. kInvalidArgument, naming the event's sequence number, for
// an unknown tier, no event in its oneof, or a malformed key (Stored and Removed need one).
absl::StatusOr<ChunkEvent> FromProto(const v1::ChunkEvent& event);

// An index event as the cluster's WatchEvents tells it (no sequence number, no parent: the
// engine feeds that publish these have none to give).
v1::ChunkEvent ToProto(const ChunkEvent& event);

// Appends a kStored event for each chunk of a columnar ListChunks page, in order. All or
// nothing: kInvalidArgument, appending none, when the columns' lengths disagree, the digests do
// not add up to the keys' digest sizes, or a key or tier does not convert.
absl::Status AppendListedChunks(const v1::ChunkColumns& columns, std::vector<ChunkEvent>& out);

}  // namespace strata::controller
