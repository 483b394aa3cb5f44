#include "storage/remote/fault_injecting_transport.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace strata::storage::remote {
namespace {

using Clock = std::chrono::steady_clock;

bool Matches(const FaultRule& rule, PeerId peer, RequestKind kind) {
  return (!rule.peer || *rule.peer == peer) &&
         (rule.requests == RequestKind::kAny || rule.requests == kind);
}

}  // namespace

// Shared with the completions of forwarded requests, which may outlive the wrapper.
class FaultInjectingTransport::State {
 public:
  // What to do with a request held back: `fire(OK)` at its time, or `fire(kCancelled)` when it is
  // cancelled or the wrapper goes away first.
  using Fire = absl::AnyInvocable<void(absl::Status) &&>;

  State() : timer_([this] { RunTimer(); }) {}
  ~State() { Shutdown(); }

  // Stops the timer and completes every held request with kCancelled. Idempotent.
  void Shutdown() {
    std::vector<Fire> cancelled;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      for (auto& [id, held] : held_) cancelled.push_back(std::move(held.fire));
      held_.clear();
    }
    if (timer_.joinable()) timer_.join();
    for (Fire& fire : cancelled) {
      std::move(fire)(absl::CancelledError("fault injection: transport destroyed"));
    }
  }

  RequestId NextId() { return next_id_.fetch_add(1); }

  // The first rule that matches (one hit counted), if any.
  std::optional<FaultRule> Match(PeerId peer, RequestKind kind) {
    absl::MutexLock lock(&mu_);
    for (auto it = rules_.begin(); it != rules_.end(); ++it) {
      if (!Matches(*it, peer, kind)) continue;
      FaultRule hit = *it;
      if (--it->count == 0) rules_.erase(it);
      switch (hit.kind) {
        case FaultKind::kDrop:
          ++counts_.dropped;
          break;
        case FaultKind::kDelay:
          ++counts_.delayed;
          break;
        case FaultKind::kCorrupt:
          break;  // counted when a byte is flipped
        case FaultKind::kCut:
          ++counts_.cut;
          break;
      }
      return hit;
    }
    return std::nullopt;
  }

  void AddRule(FaultRule rule) {
    absl::MutexLock lock(&mu_);
    if (rule.count > 0) rules_.push_back(rule);
  }
  void ClearRules() {
    absl::MutexLock lock(&mu_);
    rules_.clear();
  }
  void CountCorruption() {
    absl::MutexLock lock(&mu_);
    ++counts_.corrupted;
  }
  FaultCounts counts() const {
    absl::MutexLock lock(&mu_);
    return counts_;
  }

  void Hold(RequestId id, Clock::time_point when, Fire fire) {
    {
      absl::MutexLock lock(&mu_);
      if (!stopping_) {
        held_.emplace(id, Held{when, std::move(fire)});
        woken_ = true;
        return;
      }
    }
    std::move(fire)(absl::CancelledError("fault injection: transport destroyed"));
  }

  // Forwarded requests, for Cancel: registered before the inner request starts, given its inner
  // id once it has, forgotten when it completes.
  void Forwarding(RequestId id) {
    absl::MutexLock lock(&mu_);
    inner_ids_[id] = 0;
  }
  void Forwarded(RequestId id, RequestId inner) {
    absl::MutexLock lock(&mu_);
    if (auto it = inner_ids_.find(id); it != inner_ids_.end()) it->second = inner;
  }
  void Completed(RequestId id) {
    absl::MutexLock lock(&mu_);
    inner_ids_.erase(id);
  }

  // Cancels a held request (returns true), or names the inner request to cancel (0: none).
  RequestId Cancel(RequestId id) {
    Fire fire;
    {
      absl::MutexLock lock(&mu_);
      auto held = held_.find(id);
      if (held == held_.end()) {
        auto inner = inner_ids_.find(id);
        return inner == inner_ids_.end() ? 0 : inner->second;
      }
      fire = std::move(held->second.fire);
      held_.erase(held);
    }
    std::move(fire)(absl::CancelledError("fault injection: cancelled"));
    return 0;
  }

 private:
  struct Held {
    Clock::time_point when;
    Fire fire;
  };

  void RunTimer() {
    absl::MutexLock lock(&mu_);
    while (!stopping_) {
      const Clock::time_point now = Clock::now();
      Clock::time_point next = now + std::chrono::seconds(1);
      std::vector<Fire> due;
      for (auto it = held_.begin(); it != held_.end();) {
        if (it->second.when <= now) {
          due.push_back(std::move(it->second.fire));
          it = held_.erase(it);
        } else {
          next = std::min(next, it->second.when);
          ++it;
        }
      }
      if (!due.empty()) {
        mu_.Unlock();
        for (Fire& fire : due) std::move(fire)(absl::OkStatus());
        mu_.Lock();
        continue;
      }
      woken_ = false;
      mu_.AwaitWithDeadline(absl::Condition(this, &State::Woken),
                            absl::Now() + absl::FromChrono(next - now));
    }
  }

  mutable absl::Mutex mu_;
  std::vector<FaultRule> rules_ ABSL_GUARDED_BY(mu_);
  FaultCounts counts_ ABSL_GUARDED_BY(mu_);
  std::map<RequestId, Held> held_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<RequestId, RequestId> inner_ids_ ABSL_GUARDED_BY(mu_);
  bool Woken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || woken_; }

  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool woken_ ABSL_GUARDED_BY(mu_) = false;  // a request was held: recompute the next wake
  std::atomic<RequestId> next_id_{1};
  std::thread timer_;
};

FaultInjectingTransport::FaultInjectingTransport(Transport& inner)
    : inner_(inner), state_(std::make_shared<State>()) {}

FaultInjectingTransport::~FaultInjectingTransport() { state_->Shutdown(); }

void FaultInjectingTransport::AddRule(FaultRule rule) { state_->AddRule(rule); }
void FaultInjectingTransport::ClearRules() { state_->ClearRules(); }
FaultCounts FaultInjectingTransport::counts() const { return state_->counts(); }

std::string FaultInjectingTransport::listen_address() const { return inner_.listen_address(); }
uint64_t FaultInjectingTransport::region_bytes() const { return inner_.region_bytes(); }
absl::StatusOr<PeerId> FaultInjectingTransport::Connect(std::string_view address,
                                                        std::chrono::milliseconds timeout) {
  return inner_.Connect(address, timeout);
}
void FaultInjectingTransport::Disconnect(PeerId peer) { inner_.Disconnect(peer); }
std::vector<PeerStats> FaultInjectingTransport::Peers() const { return inner_.Peers(); }

RequestId FaultInjectingTransport::Dispatch(PeerId peer, RequestKind kind, Deadline deadline,
                                            Launch launch, Deliver deliver, Corrupt corrupt) {
  const std::optional<FaultRule> rule = state_->Match(peer, kind);
  const RequestId id = state_->NextId();
  const FaultKind fault = rule ? rule->kind : FaultKind::kDelay;
  if (rule && fault == FaultKind::kDrop) {
    state_->Hold(id, deadline, [deliver = std::move(deliver)](absl::Status held) mutable {
      std::move(deliver)(
          held.ok() ? absl::DeadlineExceededError("fault injection: the request was dropped")
                    : held);
    });
    return id;
  }
  const bool cut = rule && fault == FaultKind::kCut;
  const bool corrupting = rule && fault == FaultKind::kCorrupt;
  auto go = [this, state = state_, id, peer, cut, corrupting, launch = std::move(launch),
             deliver = std::move(deliver),
             corrupt = std::move(corrupt)](absl::Status held) mutable {
    if (!held.ok()) {
      std::move(deliver)(held);  // cancelled while held back
      return;
    }
    state->Forwarding(id);
    const RequestId inner = std::move(launch)(
        [state, id, cut, corrupting, deliver = std::move(deliver),
         corrupt = std::move(corrupt)](absl::StatusOr<std::string> outcome) mutable {
          state->Completed(id);
          // Whether the inner request was cancelled by the cut or (racing it) had finished
          // first, its completion was lost with the link, as on a real cut.
          if (cut) outcome = absl::UnavailableError("fault injection: link cut mid-transfer");
          if (outcome.ok() && corrupting && corrupt(*outcome)) state->CountCorruption();
          std::move(deliver)(std::move(outcome));
        });
    state->Forwarded(id, inner);
    if (cut) inner_.Disconnect(peer);
  };
  if (rule && fault == FaultKind::kDelay) {
    state_->Hold(id, Clock::now() + rule->delay, std::move(go));
  } else {
    std::move(go)(absl::OkStatus());
  }
  return id;
}

namespace {

// A Completion seen as a Reply without bytes.
FaultInjectingTransport::Deliver AsDeliver(Transport::Completion done) {
  return [done = std::move(done)](absl::StatusOr<std::string> outcome) mutable {
    std::move(done)(outcome.status());
  };
}

}  // namespace

RequestId FaultInjectingTransport::Read(PeerId peer, std::span<const Segment> segments,
                                        Deadline deadline, Completion done) {
  std::vector<Segment> copy(segments.begin(), segments.end());
  const Segment first = copy.empty() ? Segment{} : copy.front();
  auto launch = [this, peer, copy = std::move(copy), deadline](Finish finish) mutable {
    return inner_.Read(peer, copy, deadline, [finish = std::move(finish)](absl::Status s) mutable {
      std::move(finish)(s.ok() ? absl::StatusOr<std::string>(std::string())
                               : absl::StatusOr<std::string>(s));
    });
  };
  auto corrupt = [first](std::string&) {
    if (first.local.empty()) return false;
    first.local[first.local.size() / 2] ^= std::byte{0x5a};
    return true;
  };
  return Dispatch(peer, RequestKind::kRead, deadline, std::move(launch), AsDeliver(std::move(done)),
                  std::move(corrupt));
}

RequestId FaultInjectingTransport::Call(PeerId peer, std::string request, Deadline deadline,
                                        Reply done) {
  auto launch = [this, peer, request = std::move(request), deadline](Finish finish) mutable {
    return inner_.Call(peer, std::move(request), deadline, std::move(finish));
  };
  auto corrupt = [](std::string& reply) {
    if (reply.empty()) return false;
    reply[reply.size() / 2] ^= 0x5a;
    return true;
  };
  return Dispatch(peer, RequestKind::kCall, deadline, std::move(launch), std::move(done),
                  std::move(corrupt));
}

void FaultInjectingTransport::Cancel(RequestId request) {
  const RequestId inner = state_->Cancel(request);
  if (inner != 0) inner_.Cancel(inner);
}

}  // namespace strata::storage::remote
