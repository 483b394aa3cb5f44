#include "storage/remote/internal/landing.h"

#include <memory>
#include <utility>

#include "core/page_prefault.h"

namespace strata::storage::remote::internal {

Landing::Landing(const PrefaultedRegion& arena) : arena_(arena), thread_("strata-land") {}

void Landing::Detach() {
  // Reads queued hold the transport they were given; later ones fail.
  transport_.store(nullptr, std::memory_order_release);
  thread_.Stop();
}

void Landing::Read(PeerId peer, std::vector<Segment> segments, Deadline deadline,
                   Transport::Completion done) {
  Transport* transport = this->transport();
  struct Pending {
    std::vector<Segment> segments;
    Transport::Completion done;
  };
  auto pending = std::make_shared<Pending>(Pending{std::move(segments), std::move(done)});
  const bool queued =
      transport != nullptr && thread_.Submit([this, transport, peer, deadline, pending] {
        for (const Segment& segment : pending->segments) arena_.ForWrite(segment.local);
        transport->Read(peer, pending->segments, deadline, std::move(pending->done));
      });
  if (!queued) std::move(pending->done)(absl::UnavailableError("remote: not taking transfers"));
}

void Landing::Run(absl::AnyInvocable<void() &&> work) {
  auto held = std::make_shared<absl::AnyInvocable<void() &&>>(std::move(work));
  if (!thread_.Submit([held] { std::move (*held)(); })) std::move (*held)();
}

}  // namespace strata::storage::remote::internal
