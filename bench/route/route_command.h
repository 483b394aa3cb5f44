// `strata-bench route`: replays the production conversation trace (../shared/traces/) over N
// simulated instances, each with a host and a disk tier (route/instance_cache.h), routed three
// ways in turn: round-robin; longest prefix as Dynamo's router scores it (fewest uncached blocks
// plus queued blocks, whatever tier the overlap lies in); and Strata's Route (the lowest modelled
// TTFT, controller/routing/ttft_model.h, which prices each cached chunk by its tier and the
// queue by the instance's queued prefill tokens). Every instance serves its requests in arrival
// order, one at a time; a request's service time is the model's load plus prefill (a cached
// chunk slower to load than to recompute is recomputed, on every router alike), its TTFT the
// time from its arrival to the end of its service. The KV a request computes joins its
// instance's host tier when its service ends.
//
// Prints one JSON document: per router, the hit ratio (prompt tokens found cached), the loaded
// ratio (of those, tokens faster to load than to recompute), modelled mean and p90 TTFT, and the
// load imbalance: max over mean of the instances' queued prefill tokens averaged over arrivals.
// A "no cache" row (round-robin, everything recomputed) is the baseline. Everything here is
// modelled: no engine runs.
#pragma once

#include <string>

namespace strata::bench {

struct RouteCommandOptions {
  std::string trace_file;
  uint32_t instances = 8;
  // Per instance; trace blocks are 512 tokens of the geometry's KV.
  std::string host_capacity = "64GiB";
  std::string disk_capacity = "1TiB";
  // Arrivals at `load_scale` times the trace's rate (its timestamps divided by it).
  double load_scale = 1.0;
  std::string geometry = "llama8b";
  double prefill_us_per_token = 40;
  double host_gbps = 25;
  double disk_gbps = 1.4;
};

// Exit code: 0, 1 for bad options or an unreadable trace.
int RunRouteCommand(const RouteCommandOptions& options);

}  // namespace strata::bench
