// Simulated engine processes (bench/engine/sim_engine) for integration tests: start one against a
// daemon's engine socket, run it to completion, and read the JSON line it prints per request.
// Every sim_engine checks each token it loads against the KV it would have computed
// ("wrong_values" must stay 0 whatever happens).
//
// Thread-safety: none needed; one test thread drives its engines. Each engine is a child process
// owned by the returned Subprocess (killed when it is destroyed).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/json_fields.h"
#include "tests/support/subprocess.h"

namespace strata::test_support {

// Starts sim_engine on `socket` with `args` (its flags: --prompt, --repeat, ...).
std::unique_ptr<Subprocess> StartSimEngine(const std::string& socket,
                                           std::vector<std::string> args);
// Runs an engine to completion (60 s at most); adds a test failure unless it exits 0. Returns
// its request lines, without the summary.
std::vector<std::string> RunSimEngine(const std::string& socket, std::vector<std::string> args);
// The JSON lines of an engine's stdout (its requests, then its summary).
std::vector<std::string> SimEngineJsonLines(const Subprocess& engine);

}  // namespace strata::test_support
