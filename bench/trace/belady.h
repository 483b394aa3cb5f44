// Belady's MIN over a trace's block references: the most block hits any cache of `capacity`
// blocks could score, knowing the future. Every block of every request is a reference (not only
// the hit prefix), a miss may bypass the cache, and the victim is the block used furthest in
// the future. An upper bound for the prefix-hit ratio of any online policy at that capacity.
#pragma once

#include <cstdint>

#include "bench/trace/trace.h"

namespace strata::bench {

// Block hits / total blocks. O(references * log capacity).
double BeladyHitRatio(const Trace& trace, uint64_t capacity_blocks);

}  // namespace strata::bench
