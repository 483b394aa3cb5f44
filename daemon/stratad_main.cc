// stratad: the Strata KV-cache daemon. Configuration: embedded default < --config FILE < flags
// (stratad --help). SIGTERM and SIGINT drain and stop it; exit status 0 after a clean stop.
#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "core/process_logging.h"
#include "core/process_malloc.h"
#include "core/stop_signals.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  // Debian builds abseil without NDEBUG, which turns on absl::Mutex deadlock detection: a global
  // lock-order graph updated on every acquisition (about 4x the cost of an uncontended lock).
  // Lock order is checked by the tests (they keep it on); the daemon's hot paths do without.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  strata::TuneMallocForLargeBuffers();
  const sigset_t signals = strata::BlockStopSignals();
  using strata::daemon::ConfigEnvironment;
  absl::StatusOr<std::optional<strata::daemon::DaemonConfig>> config =
      strata::daemon::ParseCommandLine(argc, argv, ConfigEnvironment::FromProcess());
  if (!config.ok()) {
    std::fprintf(stderr, "stratad: %s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (!config->has_value()) return 0;
  strata::SetUpLogging("stratad", (*config)->log.level);

  absl::StatusOr<std::unique_ptr<strata::daemon::Daemon>> daemon =
      strata::daemon::Daemon::Create(**config);
  if (!daemon.ok()) {
    spdlog::critical("stratad: {}", std::string(daemon.status().message()));
    return 1;
  }
  if (absl::Status started = (*daemon)->Start(); !started.ok()) {
    spdlog::critical("stratad: {}", std::string(started.message()));
    return 1;
  }
  spdlog::info("stratad: {} received, draining", strata::AwaitStopSignal(signals));
  (*daemon)->Stop();
  return 0;
}
