// Rendering of control-API answers for people (aligned tables) and for programs (--json: the
// protobuf JSON mapping, or for `strata hash` an equivalent document). Pure functions.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "strata/v1/control.pb.h"

namespace strata::cli {

// The protobuf JSON mapping of `message`, fields with default values included, one line.
std::string ToJson(const google::protobuf::Message& message);

std::string FormatHealth(const v1::HealthResponse& health);
std::string FormatStats(const v1::StatsResponse& stats);
std::string FormatLookup(const v1::LookupResponse& lookup);
std::string FormatPin(const v1::PinResponse& pin);
std::string FormatUnpin(const v1::UnpinResponse& unpin);
// `instance`: a peer the chunks were copied to ("" for a move between this node's tiers).
std::string FormatMove(const v1::MoveResponse& move, v1::Tier target, std::string_view instance);
std::string FormatClear(const v1::ClearResponse& clear);
std::string FormatCompress(const v1::CompressResponse& compress);
std::string FormatDecompress(const v1::DecompressResponse& decompress);
std::string FormatDrain(const v1::DrainResponse& drain);
// `strata peers`: the node's id and address, then one line per peer.
std::string FormatPeers(const v1::ListPeersResponse& peers);
// `strata ls`: a table of chunks, then how to get the next page when there is one.
std::string FormatChunks(const v1::ListChunksResponse& page);
// `strata --controller ... lookup`: each instance's cached prefix, longest first, by tier.
std::string FormatClusterLookup(const v1::ClusterLookupResponse& lookup);
// `strata --controller ... route`: the candidates by modelled TTFT, with the score's parts.
std::string FormatRoute(const v1::RouteResponse& route);
// `strata --controller ... instances`: one line per registered daemon.
std::string FormatInstances(const v1::ListInstancesResponse& instances);
// The cluster's Stats: membership and the index, the answering daemons' totals, then each
// daemon that did not answer with its error.
std::string FormatClusterStats(const v1::ClusterStatsResponse& stats);
// The answer of a node command (stats, pin, unpin, move, clear) in `result`, as the command's
// own format renders it; `move_target` and `peer` are the move's (see FormatMove).
std::string FormatNodeResult(const v1::NodeResult& result, v1::Tier move_target,
                             std::string_view peer);
// The response message in `result` (for --json).
const google::protobuf::Message& NodeResponse(const v1::NodeResult& result);
// A node command forwarded by the controller: each instance's answer, through `format`, or
// its error.
std::string FormatForwarded(const v1::NodeCallResponse& forwarded,
                            const std::function<std::string(const v1::NodeResult&)>& format);
// `strata events`: one line per event.
std::string FormatEvent(const v1::ChunkEvent& event);

// "host" -> TIER_HOST, and so on for device, disk, remote; kInvalidArgument otherwise.
absl::StatusOr<v1::Tier> ParseTier(std::string_view name);
// TIER_HOST -> "host"; "?" for unknown values.
std::string TierName(v1::Tier tier);

// `strata hash`: the layout, its fingerprint and one line per chunk key.
struct HashReport {
  KvLayout layout;
  HashAlgorithm algorithm = HashAlgorithm::kXxh3_128;
  std::string seed;
  std::span<const ChunkKey> keys;
  std::span<const uint32_t> chunk_token_counts;  // tokens each key covers
};
std::string FormatHash(const HashReport& report, bool json);

// 1536 -> "1.5 KiB".
std::string HumanBytes(uint64_t bytes);

}  // namespace strata::cli
