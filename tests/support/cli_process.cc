#include "tests/support/cli_process.h"

#include <chrono>
#include <optional>
#include <utility>

#include "tests/support/subprocess.h"

namespace strata::test_support {

CliResult RunCli(const std::string& cli_path, std::vector<std::string> args) {
  args.insert(args.begin(), cli_path);
  Subprocess process(std::move(args));
  const std::optional<int> code = process.Wait(std::chrono::seconds(20));
  return {code.value_or(-1), process.Stdout(), process.Stderr()};
}

}  // namespace strata::test_support
