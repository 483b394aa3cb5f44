// stratad: the Strata KV-cache daemon. Configuration: embedded default < --config FILE < flags
// (stratad --help). SIGTERM and SIGINT drain and stop it; exit status 0 after a clean stop.
#include <malloc.h>

#include <cstdio>

#include "absl/synchronization/mutex.h"
#include "core/process_logging.h"
#include "core/stop_signals.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  // Debian builds abseil without NDEBUG, which turns on absl::Mutex deadlock detection: a global
  // lock-order graph updated on every acquisition (about 4x the cost of an uncontended lock).
  // Lock order is checked by the tests (they keep it on); the daemon's hot paths do without.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Chunk-sized buffers (disk staging, promotions, compaction) come and go on many threads.
  // glibc raises its mmap threshold past them after the first frees, then serves them from
  // per-thread arenas that keep what was freed: the soak saw 2 GB of free memory held this way
  // (tests/soak). A fixed threshold (which also stops glibc moving it) maps each allocation of
  // 256 KiB or more on its own and unmaps it when freed.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  // The fixed threshold also pins glibc's trim threshold at 128 KiB: a request of 128 KiB or so
  // (a Lookup of a 32K-token prompt) freed at the top of an arena handed its pages back and
  // faulted them in again on the next call (Lookups by tokens at 0.30x a trivial call's rate;
  // 0.59-0.71x with 4 MiB). An arena keeps at most this much free at its top.
  mallopt(M_TRIM_THRESHOLD, 4 << 20);
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
