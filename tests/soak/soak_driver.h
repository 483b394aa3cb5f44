// The soak: simulated engines store and load through a real stratad with a disk tier for a
// given time while a driver injects the faults a fleet sees: engines SIGKILLed mid-request (one
// at a time and all at once), the daemon SIGKILLed under load and restarted on the same disk,
// the disk's filesystem filled up, tenants cleared. The driver checks, all along:
//   - no engine ever loads a wrong value (every sim_engine checks every element it loads);
//   - with every engine dead, the daemon holds no session, lease or reservation, its
//     descriptors and mappings are back to what they were at its first such moment, and once
//     it is warm (90 s) its RSS is within `rss_growth_limit` of its level (the largest RSS of
//     such moments up to the first past the warm-up). Daemons live in phases so that the bound
//     covers most of the run: the first daemon lives through the steady part, then churn phases
//     (`churn_kills` short lives) alternate with one long life; the report says what share of
//     the run a warm daemon was under the bound;
//   - every chunk the daemon acknowledged on disk before a SIGKILL is found after its restart:
//     kills after a Drain are checked, and every other SIGKILL under load too, taken with the
//     engines frozen (SIGSTOP, sessions open, requests in flight) once the disk tier holds still,
//     its listing then being exactly what it had written (no eviction can come between);
//   - every engine that was not killed exits 0, within its time limit.
// A violation is recorded (not thrown) and the run goes on, so one report shows them all.
//
// Threading: RunSoak runs on the caller's thread and owns every process it starts (killed by
// the time it returns).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::soak {

struct SoakOptions {
  std::chrono::seconds duration{1800};
  uint32_t engines = 4;  // engines running at any time
  uint64_t seed = 1;
  // The first part of the run without daemon kills: the longest daemon lifetime, over which
  // its descriptors, mappings and RSS are compared.
  double steady_fraction = 0.25;
  // In a churn phase, a daemon lives a uniform time in [min, max] before the driver kills it;
  // `churn_kills` such lives, then one long life in [min_long, max_long], and again.
  std::chrono::seconds min_daemon_life{10};
  std::chrono::seconds max_daemon_life{26};
  uint32_t churn_kills = 4;
  std::chrono::seconds min_long_daemon_life{300};
  std::chrono::seconds max_long_daemon_life{420};
  // Each engine is killed mid-run with this probability, at a uniform time in its first
  // `max_engine_kill_delay` (an engine runs for ~50-500 ms).
  double engine_kill_probability = 0.5;
  std::chrono::milliseconds max_engine_kill_delay{400};
  // Every engine is killed at once (then the daemon is checked for leaks) after a uniform time
  // in [min, max].
  std::chrono::seconds min_mass_kill_gap{15};
  std::chrono::seconds max_mass_kill_gap{35};
  std::chrono::seconds tenant_clear_gap{12};  // mean time between tenant clears
  std::chrono::seconds disk_fill_gap{40};     // between disk fills; each lasts disk_fill_time
  std::chrono::seconds disk_fill_time{5};
  std::string host_capacity = "32MiB";
  std::string disk_capacity = "96MiB";
  uint64_t disk_filesystem_bytes = 160ull << 20;  // the loop-mounted filesystem's size
  double rss_growth_limit = 0.10;
  // Scratch directory (sockets, the disk image, failing daemons' logs); created; empty: a new
  // one under /tmp.
  std::string work_dir;
};

struct SoakReport {
  double elapsed_s = 0;
  uint64_t daemon_starts = 0;
  uint64_t daemon_kills_sudden = 0;   // under load, engines alive
  uint64_t daemon_kills_checked = 0;  // after a Drain, acknowledged chunks checked
  // Under load with the engines frozen, the disk tier's listing checked after the restart.
  uint64_t daemon_kills_frozen = 0;
  uint64_t engines_started = 0;
  uint64_t engine_kills = 0;
  uint64_t mass_kills = 0;
  uint64_t engines_exited = 0;  // ran to completion
  uint64_t requests = 0;
  uint64_t requests_with_hits = 0;
  uint64_t hit_tokens = 0;
  uint64_t requests_saved = 0;  // requests that stored bytes
  uint64_t bytes_loaded = 0;
  uint64_t failed_blocks = 0;  // loads the engines recomputed
  uint64_t wrong_values = 0;
  // The engines' sessions (their summaries; engines SIGKILLed print none): dropped (the daemon's
  // SIGKILLs drop them; lateness never does), calls past their deadline, late replies discarded,
  // and lookups answered 0 hits for want of an answer in time.
  uint64_t sessions_dropped = 0;
  uint64_t calls_past_deadline = 0;
  uint64_t late_replies = 0;
  uint64_t lookups = 0;
  uint64_t lookups_past_budget = 0;
  uint64_t tenant_clears = 0;
  uint64_t disk_fills = 0;
  std::string disk_fill_skipped;  // why disk fills did not run; empty when they did
  uint64_t acked_chunks_checked = 0;
  uint64_t acked_chunks_lost = 0;
  uint64_t quiescent_checks = 0;
  // The daemon's RSS under load counts the staging buffers of demotions on their way to the
  // disk (up to [disk] demotion_queue_bytes): its high-water is sampled all along; the leak
  // check compares the RSS of moments with no engine.
  uint64_t rss_high_water = 0;
  uint64_t rss_quiescent_max = 0;
  // Checks with no engine after the daemon's RSS level was set, and the largest RSS growth
  // over that level they saw.
  uint64_t rss_checks = 0;
  double rss_max_growth = 0;
  // Of the run, the time a daemon past the warm-up was alive (under the RSS bound).
  double rss_covered_s = 0;
  int64_t fd_max_growth = 0;
  int64_t mapping_max_growth = 0;
  uint64_t max_restart_ms = 0;  // SIGKILL to serving again (the disk tier's recovery included)
  std::vector<std::string> violations;

  bool ok() const { return violations.empty(); }
  std::string ToText() const;
};

SoakReport RunSoak(const SoakOptions& options);

}  // namespace strata::soak
