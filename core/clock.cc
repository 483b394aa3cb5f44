#include "core/clock.h"

#include <time.h>

namespace strata {

MonoTime SystemClock::Now() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return MonoTime(static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec);
}

SystemClock* SystemClock::Get() {
  static SystemClock* const clock = new SystemClock();
  return clock;
}

int64_t UnixMicros() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

}  // namespace strata
