// DeferredCompletions hands requests the tiered store finished on its own threads back to the
// session thread: a load that needed promotion from a lower tier, a lookup that asked the remote
// tier's peers. The store's thread posts the result, an eventfd wakes the session thread's epoll
// loop, and that thread takes the results and answers the engines.
//
// Thread-safety: Post and Close from any thread; Take from the session thread. Ownership: shared
// (std::shared_ptr) between the session server and every request in flight, so a late completion
// never touches a server that is gone. After Close, posted results are dropped at once (a load's
// leases released on the posting thread).
#pragma once

#include <cstdint>
#include <memory>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/scoped_fd.h"
#include "storage/tiered/tiered_store.h"

namespace strata::daemon {

struct DeferredCompletion {
  uint64_t session_id = 0;
  uint64_t request_id = 0;
  // A PrepareLoad's leases, or the tiers a Lookup located.
  std::variant<storage::LoadLeases, std::vector<storage::Tier>> result;
};

class DeferredCompletions {
 public:
  // kInternal (errno) when no eventfd can be made.
  static absl::StatusOr<std::shared_ptr<DeferredCompletions>> Create();

  // Readable (level) while results wait to be taken.
  int fd() const { return event_fd_.get(); }

  void Post(DeferredCompletion completion);
  // Every result posted so far, oldest first; clears the eventfd.
  std::vector<DeferredCompletion> Take();
  // Drops the queue and every later Post.
  void Close();

 private:
  explicit DeferredCompletions(ScopedFd event_fd) : event_fd_(std::move(event_fd)) {}

  const ScopedFd event_fd_;
  absl::Mutex mu_;
  std::vector<DeferredCompletion> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace strata::daemon
