// Request traces in the Mooncake format (../shared/traces/README.md): one JSON object per line
// with `timestamp` (ms), `input_length` (tokens), `output_length` and `hash_ids`, the prefix
// block ids of the prompt, one per trace block (512 tokens). Equal ids mean equal prefixes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strata::bench {

inline constexpr uint32_t kTraceBlockTokens = 512;

struct TraceRequest {
  int64_t timestamp_ms = 0;
  uint32_t input_tokens = 0;
  // Prefix block ids: blocks[i] names the prompt's first (i + 1) * kTraceBlockTokens tokens.
  std::vector<uint64_t> blocks;
  // The tenant the request belongs to (0 for traces without tenants).
  uint32_t tenant = 0;

  // The last block holds fewer than kTraceBlockTokens tokens.
  bool last_block_partial() const { return input_tokens % kTraceBlockTokens != 0; }
};

struct Trace {
  std::string name;
  std::vector<TraceRequest> requests;

  uint64_t total_blocks() const;
  uint64_t unique_blocks() const;
};

// Parses one line. kInvalidArgument naming the field when a field is missing or malformed, or
// when the block count is not ceil(input_length / 512).
absl::StatusOr<TraceRequest> ParseTraceLine(std::string_view line);
// Reads a whole file; blank lines are skipped; errors carry the line number. kNotFound when the
// file cannot be opened.
absl::StatusOr<Trace> LoadTrace(const std::string& path);

}  // namespace strata::bench
