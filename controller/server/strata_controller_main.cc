// strata-controller: the Strata cluster's chunk index and router. Configuration: embedded
// default < --config FILE < flags (strata-controller --help). SIGTERM and SIGINT stop it; exit
// status 0 after a clean stop.
#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "controller/server/controller.h"
#include "controller/server/controller_config.h"
#include "core/process_logging.h"
#include "core/process_malloc.h"
#include "core/stop_signals.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  // As in stratad: lock order is checked by the tests, not on every acquisition in production.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  strata::TuneMallocForLargeBuffers();
  const sigset_t signals = strata::BlockStopSignals();
  absl::StatusOr<std::optional<strata::controller::ControllerConfig>> config =
      strata::controller::ParseControllerCommandLine(argc, argv);
  if (!config.ok()) {
    std::fprintf(stderr, "strata-controller: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (!config->has_value()) return 0;
  strata::SetUpLogging("strata-controller", (*config)->log.level);

  absl::StatusOr<std::unique_ptr<strata::controller::Controller>> controller =
      strata::controller::Controller::Create(**config);
  if (!controller.ok()) {
    spdlog::critical("strata-controller: {}", std::string(controller.status().message()));
    return 1;
  }
  if (absl::Status started = (*controller)->Start(); !started.ok()) {
    spdlog::critical("strata-controller: {}", std::string(started.message()));
    return 1;
  }
  spdlog::info("strata-controller: {} received, stopping", strata::AwaitStopSignal(signals));
  (*controller)->Stop();
  return 0;
}
