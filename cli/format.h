// Rendering of control-API answers for people (aligned tables) and for programs (--json: the
// protobuf JSON mapping, or for `strata hash` an equivalent document). Pure functions.
#pragma once

#include <span>
#include <string>

#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "strata/v1/control.pb.h"

namespace strata::cli {

// The protobuf JSON mapping of `message`, fields with default values included, one line.
std::string ToJson(const google::protobuf::Message& message);

std::string FormatHealth(const v1::HealthResponse& health);
std::string FormatStats(const v1::StatsResponse& stats);
std::string FormatLookup(const v1::LookupResponse& lookup);

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
