// Replays a trace against a real HostTier (arena, allocator, index, leases, checksums), in
// process, the way an engine's connector drives it: each request leases its longest cached
// prefix (AcquirePrefix), stores the blocks after it (Reserve / write / Commit; the last
// partial block marked partial, each block's parent named), then releases its leases. One
// trace block is one Strata chunk of a one-page layout, so capacity in pages = capacity in
// blocks. Every leased chunk's payload is checked against the block it must hold.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "bench/trace/trace.h"

namespace strata::bench {

struct ReplayOptions {
  std::string policy;
  uint64_t capacity_blocks = 0;
};

struct ReplayResult {
  uint64_t capacity_bytes = 0;
  // Blocks served from the cache: each request's longest cached prefix.
  uint64_t hit_blocks = 0;
  uint64_t total_blocks = 0;
  uint64_t bytes_written = 0;  // committed into the tier
  uint64_t bytes_read = 0;     // leased out of the tier (served)
  uint64_t evictions = 0;
  uint64_t rejected_stores = 0;  // Reserve answered kResourceExhausted
  uint64_t wrong_payloads = 0;   // a leased chunk held another block's bytes: must be 0
  double seconds = 0;

  double hit_ratio() const {
    return total_blocks == 0 ? 0 : static_cast<double>(hit_blocks) / total_blocks;
  }
};

// kInvalidArgument for an unknown policy or a zero capacity; other errors of the tier as it
// reports them (a failed Commit or a checksum failure is an error: the replay must be clean).
absl::StatusOr<ReplayResult> ReplayOnHostTier(const Trace& trace, const ReplayOptions& options);

}  // namespace strata::bench
