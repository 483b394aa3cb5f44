#include "core/background_prefault.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace strata {

BackgroundPrefault::BackgroundPrefault(const PrefaultedRegion& region, Mode mode,
                                       std::chrono::milliseconds give_up_after,
                                       std::chrono::milliseconds retry)
    : region_(region) {
  thread_ = std::thread([this, mode, give_up_after, retry] { Run(mode, give_up_after, retry); });
}

BackgroundPrefault::~BackgroundPrefault() {
  stop_.store(true, std::memory_order_release);
  thread_.join();
}

bool BackgroundPrefault::Resident(uint64_t offset, uint64_t length) const {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> pages((length + page - 1) / page);
  if (::mincore(region_.mapping().data() + offset, length, pages.data()) != 0) return false;
  return std::all_of(pages.begin(), pages.end(), [](unsigned char p) { return (p & 1) != 0; });
}

void BackgroundPrefault::Run(Mode mode, std::chrono::milliseconds give_up_after,
                             std::chrono::milliseconds retry) {
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  const std::span<std::byte> mapping = region_.mapping();
  const uint64_t steps = (mapping.size() + kStepBytes - 1) / kStepBytes;
  std::vector<bool> in(steps, false);
  uint64_t left = steps;
  const auto deadline = std::chrono::steady_clock::now() + give_up_after;
  while (left > 0 && !stop_.load(std::memory_order_acquire)) {
    bool progressed = false;
    for (uint64_t s = 0; s < steps && !stop_.load(std::memory_order_acquire); ++s) {
      if (in[s]) continue;
      const uint64_t offset = s * kStepBytes;
      const uint64_t length = std::min<uint64_t>(kStepBytes, mapping.size() - offset);
      if (mode == Mode::kResidentOnly && !Resident(offset, length)) continue;
      region_.ForWrite(mapping.subspan(offset, length));
      in[s] = true;
      --left;
      progressed = true;
      done_bytes_.fetch_add(length, std::memory_order_acq_rel);
    }
    if (left == 0 || std::chrono::steady_clock::now() >= deadline) break;
    if (!progressed) {
      // Sleep in short slices so that destruction is not held up by the retry period.
      const auto wake = std::chrono::steady_clock::now() + retry;
      while (!stop_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < wake) {
        std::this_thread::sleep_for(std::min(retry, std::chrono::milliseconds(10)));
      }
    }
  }
  finished_.store(true, std::memory_order_release);
}

}  // namespace strata
