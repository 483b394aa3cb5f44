#include "tests/support/sim_engine_process.h"

#include <chrono>
#include <optional>
#include <utility>

#include "gtest/gtest.h"

namespace strata::test_support {

std::unique_ptr<Subprocess> StartSimEngine(const std::string& socket,
                                           std::vector<std::string> args) {
  std::vector<std::string> argv = {STRATA_SIM_ENGINE_PATH, "--socket", socket};
  argv.insert(argv.end(), std::make_move_iterator(args.begin()),
              std::make_move_iterator(args.end()));
  return std::make_unique<Subprocess>(std::move(argv));
}

std::vector<std::string> RunSimEngine(const std::string& socket, std::vector<std::string> args) {
  std::unique_ptr<Subprocess> engine = StartSimEngine(socket, std::move(args));
  const std::optional<int> code = engine->Wait(std::chrono::milliseconds(60'000));
  EXPECT_EQ(code, 0) << engine->Stdout() << engine->Stderr();
  std::vector<std::string> lines = SimEngineJsonLines(*engine);
  if (!lines.empty() && lines.back().find("\"summary\"") != std::string::npos) lines.pop_back();
  return lines;
}

std::vector<std::string> SimEngineJsonLines(const Subprocess& engine) {
  std::vector<std::string> lines;
  for (std::string& line : engine.StdoutLines()) {
    if (line.starts_with("{")) lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace strata::test_support
