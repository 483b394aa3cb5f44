// strata_soak: runs the soak (soak_driver.h) for a given time and prints its report.
// Exit status: 0 when no invariant was violated, 1 otherwise, 2 for bad flags.
#include <iostream>

#include "CLI/CLI.hpp"
#include "tests/soak/soak_driver.h"

int main(int argc, char** argv) {
  strata::soak::SoakOptions options;
  uint64_t seconds = options.duration.count();
  CLI::App app{"strata_soak: engines and a daemon under random kills, disk fills and clears"};
  app.add_option("--seconds", seconds, "how long to run");
  app.add_option("--engines", options.engines, "engines running at once")->check(CLI::Range(1, 64));
  app.add_option("--seed", options.seed);
  app.add_option("--steady-fraction", options.steady_fraction,
                 "the first part of the run without daemon kills")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--work-dir", options.work_dir, "scratch directory (default: a new one in /tmp)");
  CLI11_PARSE(app, argc, argv);
  options.duration = std::chrono::seconds(seconds);
  const strata::soak::SoakReport report = strata::soak::RunSoak(options);
  std::cout << report.ToText();
  return report.ok() ? 0 : 1;
}
