// The command lines of the benchmarks that take "--name=value" flags (not Google Benchmark's).
// A pure function; thread-compatible.
#pragma once

#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"

namespace strata::bench {

// Calls `set(name, value)` for each argument of argv[1..argc) in order, split at its first '='
// ("--name" alone gives an empty value). When `set` returns false (a name it does not know, or a
// value it cannot use), prints "usage: <argv[0]> <usage>" on stderr and returns false at once.
bool ParseFlags(int argc, char** argv, std::string_view usage,
                absl::FunctionRef<bool(std::string_view name, const std::string& value)> set);

}  // namespace strata::bench
