// Clock is the time source of every deadline, lease and TTL in Strata, so tests can drive time
// by hand. SystemClock reads CLOCK_MONOTONIC; ManualClock only moves when told to.
// Both are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace strata {

// A point on a Clock's monotonic timeline, in nanoseconds from an arbitrary epoch.
using MonoTime = std::chrono::nanoseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual MonoTime Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  MonoTime Now() const override;
  // The process-wide instance; never destroyed.
  static SystemClock* Get();
};

class ManualClock final : public Clock {
 public:
  explicit ManualClock(MonoTime start = MonoTime(1'000'000'000)) : now_ns_(start.count()) {}
  MonoTime Now() const override { return MonoTime(now_ns_.load(std::memory_order_acquire)); }
  void Advance(std::chrono::nanoseconds delta) {
    now_ns_.fetch_add(delta.count(), std::memory_order_acq_rel);
  }

 private:
  std::atomic<int64_t> now_ns_;
};

// Wall-clock time in microseconds since the Unix epoch (CLOCK_REALTIME): not for deadlines, for
// timing one process's events against another's (benchmarks that span processes).
int64_t UnixMicros();

}  // namespace strata
