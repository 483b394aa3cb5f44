#include "daemon/deferred_completions.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "core/status_util.h"

namespace strata::daemon {

absl::StatusOr<std::shared_ptr<DeferredCompletions>> DeferredCompletions::Create() {
  ScopedFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd.valid()) return ErrnoToStatus(errno, "load completions: eventfd");
  return std::shared_ptr<DeferredCompletions>(new DeferredCompletions(std::move(fd)));
}

void DeferredCompletions::Post(DeferredCompletion completion) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;  // `completion` goes here, releasing its leases
    queue_.push_back(std::move(completion));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(event_fd_.get(), &one, sizeof(one));
}

std::vector<DeferredCompletion> DeferredCompletions::Take() {
  uint64_t count = 0;
  [[maybe_unused]] ssize_t n = ::read(event_fd_.get(), &count, sizeof(count));
  absl::MutexLock lock(&mu_);
  return std::exchange(queue_, {});
}

void DeferredCompletions::Close() {
  std::vector<DeferredCompletion> dropped;
  absl::MutexLock lock(&mu_);
  closed_ = true;
  dropped.swap(queue_);
}

}  // namespace strata::daemon
