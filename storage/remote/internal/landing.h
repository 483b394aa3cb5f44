// Landing does the work of bytes moving between this daemon's arena and a peer away from the
// transport's progress thread, so that the thread keeps answering (health checks included) while a
// transfer runs: Read faults a read's destination pages in (through the arena's PrefaultedRegion:
// once a granule) and then starts it, and Run runs the
// rest (the checks of what has landed, commits, faulting in the pages a peer is about to read).
// On a box whose page faults are slow, faulting in arena pages is most of a transfer's cost; done
// by the transport's thread, it starved the links' health checks and had streams cut.
//
// (core/page_prefault.h says what faulting in costs.)
//
// Threading: one owned thread ("strata-land"); every method is thread-safe. A read's completion
// runs on the transport's thread, as every transport completion does. Lifecycle: Attach the
// transport before the first Read; Detach before the transport goes: it starts what is queued
// (on the transport, still alive) and stops the thread. From then on Read completes at once with
// kUnavailable, and Run runs its work on the caller's thread.
#pragma once

#include <atomic>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "core/page_prefault.h"
#include "storage/remote/transport.h"
#include "storage/tiered/task_thread.h"

namespace strata::storage::remote::internal {

class Landing {
 public:
  // `arena` (the host arena's, which outlives this) faults in the pages reads land in.
  explicit Landing(const PrefaultedRegion& arena);

  void Attach(Transport* transport) { transport_.store(transport, std::memory_order_release); }
  // The transport, or null before Attach and after Detach.
  Transport* transport() const { return transport_.load(std::memory_order_acquire); }
  // Starts what is queued and stops the thread. Idempotent.
  void Detach();

  // Faults in each segment's local pages, then starts Transport::Read; `done` runs once, as the
  // read's completion (kUnavailable when detached).
  void Read(PeerId peer, std::vector<Segment> segments, Deadline deadline,
            Transport::Completion done);
  // Runs `work` on the landing thread, after what is queued before it.
  void Run(absl::AnyInvocable<void() &&> work);

 private:
  const PrefaultedRegion& arena_;
  std::atomic<Transport*> transport_{nullptr};
  TaskThread thread_;
};

}  // namespace strata::storage::remote::internal
