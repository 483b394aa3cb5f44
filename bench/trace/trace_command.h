// `strata-bench trace`: replays a trace against the host tier under every eviction policy at
// several capacities, next to Belady's bound from the same trace, and prints one JSON document
// (scripts/plots.sh draws it).
#pragma once

#include <string>
#include <vector>

namespace strata::bench {

struct TraceCommandOptions {
  // "conversation" (the production trace at trace_file), "mrqa" or "rag" (synthetic).
  std::string workload = "conversation";
  std::string trace_file;
  // Each a fraction of the trace's unique blocks ("5%") or a byte size ("64MiB").
  std::vector<std::string> capacities = {"1%", "2%", "5%", "10%", "25%"};
  // Empty: every policy MakeEvictionPolicy knows.
  std::vector<std::string> policies;
  unsigned threads = 2;
};

// Prints the JSON document to stdout and a table to stderr. Exit code: 0, 1 for bad options or
// an unreadable trace, 3 when a replay served a wrong payload.
int RunTraceCommand(const TraceCommandOptions& options);

}  // namespace strata::bench
