// FaultInjectingTransport wraps a Transport and makes chosen requests fail the way a network
// does, so the remote tier's and PD's failure handling is tested against the real transport
// underneath (STYLE.md: a fault-injecting wrapper per hardware seam). Faults, by rule:
//   - kDrop: the request is never sent; it completes with kDeadlineExceeded at its deadline, as
//     a request to a peer that never answers does.
//   - kDelay: the request is sent `delay` late (a slow link or a busy peer).
//   - kCorrupt: the request runs; when it succeeds, one byte of what arrived is flipped (a Read's
//     first segment, a Call's reply), as a corrupted transfer that the transport did not catch.
//   - kCut: the request is sent and the link is cut at once (the peer killed mid-transfer): the
//     request completes with kUnavailable (even when its bytes had all arrived: the completion is
//     lost with the link) and the link goes down as a dead peer's does.
// A rule matches requests by peer (any when unset) and kind, and expires after `count` hits.
// Requests no rule matches pass straight through.
//
// Thread-safety: every method is thread-safe. Completions of requests that pass through run on
// the inner transport's thread; those of dropped requests on the wrapper's timer thread. The
// inner transport must outlive the wrapper; destroying the wrapper completes the requests it
// holds back (dropped or delayed) with kCancelled.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "storage/remote/transport.h"

namespace strata::storage::remote {

enum class FaultKind : uint8_t { kDrop, kDelay, kCorrupt, kCut };
enum class RequestKind : uint8_t { kAny, kRead, kCall };

struct FaultRule {
  FaultKind kind = FaultKind::kDrop;
  std::optional<PeerId> peer;  // every peer when unset
  RequestKind requests = RequestKind::kAny;
  std::chrono::milliseconds delay{0};  // kDelay
  uint64_t count = UINT64_MAX;         // hits before the rule expires
};

struct FaultCounts {
  uint64_t dropped = 0;
  uint64_t delayed = 0;
  uint64_t corrupted = 0;
  uint64_t cut = 0;
};

class FaultInjectingTransport final : public Transport {
 public:
  explicit FaultInjectingTransport(Transport& inner);
  ~FaultInjectingTransport() override;

  FaultInjectingTransport(const FaultInjectingTransport&) = delete;
  FaultInjectingTransport& operator=(const FaultInjectingTransport&) = delete;

  // Rules are tried in the order added; the first that matches a request applies.
  void AddRule(FaultRule rule);
  void ClearRules();
  FaultCounts counts() const;

  std::string listen_address() const override;
  uint64_t region_bytes() const override;
  absl::StatusOr<PeerId> Connect(std::string_view address,
                                 std::chrono::milliseconds timeout) override;
  void Disconnect(PeerId peer) override;
  RequestId Read(PeerId peer, std::span<const Segment> segments, Deadline deadline,
                 Completion done) override;
  RequestId Call(PeerId peer, std::string request, Deadline deadline, Reply done) override;
  void Cancel(RequestId request) override;
  std::vector<PeerStats> Peers() const override;

  class State;
  using Finish = absl::AnyInvocable<void(absl::StatusOr<std::string>) &&>;
  using Deliver = Reply;

 private:
  // Starts the inner request with the completion it is given; returns its id.
  using Launch = absl::AnyInvocable<RequestId(Finish finish) &&>;
  // Flips a byte of what a request brought (a Read's memory, a Call's reply); whether it did.
  using Corrupt = absl::AnyInvocable<bool(std::string& reply)>;

  // The one path of every request: matched against the rules, then dropped, held back, or
  // launched (and corrupted or cut) as the rule says.
  RequestId Dispatch(PeerId peer, RequestKind kind, Deadline deadline, Launch launch,
                     Deliver deliver, Corrupt corrupt);

  Transport& inner_;
  std::shared_ptr<State> state_;
};

}  // namespace strata::storage::remote
