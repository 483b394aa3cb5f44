// ListChunks' answer built from one tier's page, whatever the tier: its page tokens and its
// rows (ListChunksResponse.chunks, or .columns for a columnar request).
//
// Page tokens: the host tier pages by cursor ('h' and the cursor in decimal); a tier below it
// pages by key ('k' and the hex of the key after which the listing resumes, as a v1::ChunkKey).
// A token is accepted only for the kind of tier that produced it. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "proto/strata/v1/control.pb.h"
#include "storage/codec/kv_error.h"

namespace strata::daemon {

// Empty for the first (or a finished) listing.
std::string HostPageToken(uint64_t cursor);
std::string LowerTierPageToken(const std::optional<ChunkKey>& resume_after);
// The cursor (0 for an empty token); INVALID_ARGUMENT for a token this daemon did not produce
// for the host tier.
absl::StatusOr<uint64_t> ParseHostPageToken(const std::string& token);
// The key to resume after (nullopt for an empty token); INVALID_ARGUMENT for a token this
// daemon did not produce for a tier below the host tier.
absl::StatusOr<std::optional<ChunkKey>> ParseLowerTierPageToken(const std::string& token);

// One chunk of a page, as ListChunks reports it.
struct ListedRow {
  const ChunkKey* key = nullptr;
  v1::Tier tier = v1::TIER_UNSPECIFIED;
  uint64_t size_bytes = 0;
  uint32_t num_tokens = 0;
  bool hard_pinned = false;
  uint64_t soft_pin_remaining_ms = 0;
  uint32_t leases = 0;
  uint64_t stored_bytes = 0;
  uint16_t codec_id = 0;                  // storage::CodecId; 0: stored as it is
  std::optional<storage::KvError> error;  // measured when it was encoded
};

// Appends rows 0..count-1 (`row(i)`) to `response`: as columns when `columnar`, else as entries.
void AppendRows(size_t count, absl::FunctionRef<ListedRow(size_t)> row, bool columnar,
                v1::ListChunksResponse& response);

}  // namespace strata::daemon
