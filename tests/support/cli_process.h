// Runs the strata CLI (`cli_path`, the test's STRATA_CLI_PATH) as a child process with `args` and
// collects its exit code and output, waiting at most 20 s (code -1 past that). Thread-compatible.
#pragma once

#include <string>
#include <vector>

namespace strata::test_support {

struct CliResult {
  int code = -1;
  std::string out;
  std::string err;
};

CliResult RunCli(const std::string& cli_path, std::vector<std::string> args);

}  // namespace strata::test_support
