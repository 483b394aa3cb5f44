// Transport is the seam between Strata's remote tier (and prefill->decode transfer) and the network
// (DESIGN.md section 4, T3): connect to peer daemons, read chunk bytes from a peer's registered
// memory (its host arena) into this daemon's, and exchange small request/reply messages. Nothing
// writes into a peer's memory: a peer that wants bytes reads them.
// UcxTransport (ucx_transport.h) is the real one; FaultInjectingTransport wraps any transport to
// drop, delay, corrupt and cut for tests.
//
// Memory. A transport is created over one registered region (the host arena), registered once for
// its lifetime; a peer learns the region's size (and whatever the data path needs, such as a UCX
// rkey) when it connects. Remote memory is named by an offset into the peer's region; local memory
// must lie inside the transport's own region (kInvalidArgument otherwise). Bytes move straight
// between the regions: no bounce buffer in between.
//
// Peers. Connect() names a peer by "host:port"; a peer that connects to our listener appears
// through Handlers::on_peer_up once it has authenticated (UcxTransport: by the cluster secret).
// Both sides may then read and call on the link. A link
// that fails (the peer dies, the network drops) fails every request in flight on it with
// kUnavailable and is reported once through Handlers::on_peer_down; its PeerId is never reused.
//
// Requests. Read and Call start at once and complete exactly once, through their
// callback, with OK or the reason: kDeadlineExceeded past their deadline, kCancelled after
// Cancel, kUnavailable when the link fails, kInvalidArgument for memory outside a region. When a
// Read callback runs, the transport no longer touches the request's local memory, whatever the
// status. Nothing is
// polled on a timer: completions are delivered as the network events arrive.
//
// Threading: every method is thread-safe and never blocks on the network, except Connect, which
// waits up to its timeout. Callbacks and handlers run on the transport's progress thread: they
// must return quickly and must not wait for other transport requests (they may start them).
// Destroying the transport completes whatever is in flight with kCancelled, closes every link and
// joins the progress thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::storage::remote {

// A link to one peer, numbered by the local transport from 1; never reused.
using PeerId = uint64_t;
// A Read or Call in flight, numbered by the local transport from 1; never reused.
using RequestId = uint64_t;
using Deadline = std::chrono::steady_clock::time_point;

// One contiguous piece of a transfer: `local` (in this transport's region) and the same number
// of bytes at `remote_offset` in the peer's region.
struct Segment {
  uint64_t remote_offset = 0;
  std::span<std::byte> local;
};

// How bytes move: one-sided RMA (get/put with the peer's rkey), or active messages whose data the
// receiving side places itself (rendezvous for large pieces). kAuto picks per link (data_path.h
// says how and why).
enum class DataPath : uint8_t { kAuto, kRma, kActiveMessages };

struct PeerStats {
  PeerId id = 0;
  std::string address;  // "host:port" as dialled, or the peer's address for inbound links
  bool outbound = false;
  bool up = false;
  DataPath data_path = DataPath::kAuto;  // the one the link uses (kRma or kActiveMessages)
  uint64_t bytes_read = 0;               // by our reads from the peer
  uint64_t bytes_served = 0;             // by the peer's reads of our region
  uint64_t requests_failed = 0;
  std::string last_error;  // empty while nothing failed
};

class Transport {
 public:
  using Completion = absl::AnyInvocable<void(absl::Status) &&>;
  using Reply = absl::AnyInvocable<void(absl::StatusOr<std::string>) &&>;

  // What the transport calls on its progress thread; each may be empty.
  struct Handlers {
    // A link is up (either direction): the peer's region is known and requests may start.
    std::function<void(PeerId, std::string_view address)> on_peer_up;
    // A link that was up failed or was closed (by either side); `why` says how.
    std::function<void(PeerId, const absl::Status& why)> on_peer_down;
    // A Call from a peer. The handler answers exactly once through `reply`, from any thread and
    // at any time (a dropped reply leaves the caller to its deadline). A reply to a peer that
    // has gone is discarded.
    std::function<void(PeerId, std::string request, Reply reply)> on_call;
  };

  virtual ~Transport() = default;

  // "host:port" the listener is bound to (the port the OS chose when configured with port 0);
  // empty when the transport does not listen.
  virtual std::string listen_address() const = 0;
  // The registered region's size; offsets into it are what peers read and write.
  virtual uint64_t region_bytes() const = 0;

  // Opens a link to "host:port" and waits, up to `timeout`, until it is up. kUnavailable when
  // nothing answers or the link fails first, kDeadlineExceeded when the wait ran out.
  virtual absl::StatusOr<PeerId> Connect(std::string_view address,
                                         std::chrono::milliseconds timeout) = 0;
  // Closes the link; requests in flight on it complete with kCancelled. Unknown ids are ignored.
  virtual void Disconnect(PeerId peer) = 0;

  // Copies each segment's bytes from the peer's region into `local`.
  virtual RequestId Read(PeerId peer, std::span<const Segment> segments, Deadline deadline,
                         Completion done) = 0;
  // Sends `request` to the peer's on_call handler and delivers its reply.
  virtual RequestId Call(PeerId peer, std::string request, Deadline deadline, Reply done) = 0;
  // Completes the request with kCancelled (once the transport has let go of its memory), unless
  // it completed already. Unknown ids are ignored.
  virtual void Cancel(RequestId request) = 0;

  // Every link this transport has had that is up or failed last (closed ones are forgotten).
  virtual std::vector<PeerStats> Peers() const = 0;
};

std::string_view DataPathName(DataPath path);

}  // namespace strata::storage::remote
