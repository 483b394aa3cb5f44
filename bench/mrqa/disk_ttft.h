// The time to first token of one engine's batch when most of its hits are on the daemon's disk,
// with synchronous loads against asynchronous ones (strata-bench mrqa --disk-ttft). For each
// mode a fresh daemon with a small host tier over a disk tier is primed: the "disk" prompts are
// stored first and pushed to disk by filler prompts, then the "host" prompts are stored. One
// sim_engine then serves a batch interleaving the two kinds (sim_engine --batch): with
// synchronous loads the first step waits for every disk promotion; with asynchronous loads the
// host hits are computed at once and the disk hits once their loads are over.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace strata::bench {

struct DiskTtftOptions {
  std::string geometry = "llama8b";
  uint32_t chunk_tokens = 256;
  uint32_t prompt_tokens = 1024;
  uint32_t prompts_per_kind = 4;  // disk hits and host hits in the batch
};

// A JSON object: per mode, mean / p50 / max TTFT over the batch and the means of each kind, plus
// wrong values (which must be 0). An error when a daemon or an engine could not run.
absl::StatusOr<std::string> MeasureDiskTtft(const DiskTtftOptions& options);

}  // namespace strata::bench
