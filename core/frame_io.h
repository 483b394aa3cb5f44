// Length-prefixed frames over a Unix stream socket, with optional file-descriptor passing
// (SCM_RIGHTS). Wire format: a 4-byte little-endian length N, 1 <= N <= kMaxFrameBytes, then N
// payload bytes. Used by the engine protocol on both sides (daemon and connector).
// Functions are thread-compatible: one sender and one receiver per socket at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/scoped_fd.h"

namespace strata {

inline constexpr uint32_t kMaxFrameBytes = 4u << 20;

// Most descriptors one frame carries.
inline constexpr size_t kMaxPassedFds = 4;

// Writes one frame, waiting at most `timeout` for socket space (works on blocking and
// non-blocking sockets). `fds_to_pass` (at most kMaxPassedFds, each >= 0) are attached to the
// frame with SCM_RIGHTS, in order. kInvalidArgument for an empty or oversized payload or too many
// descriptors; kUnavailable when the peer is gone or the timeout passes (the stream is then
// unusable: close it).
absl::Status SendFrame(int socket_fd, std::string_view payload, std::chrono::milliseconds timeout,
                       std::span<const int> fds_to_pass = {});

struct ReceivedFrame {
  std::string payload;
  // The descriptors the sender attached, in order (beyond kMaxPassedFds they are closed).
  std::vector<ScopedFd> passed_fds;
};

// Reads exactly one frame, waiting at most `timeout` in total. For the first `spin` of the wait
// it polls the socket without sleeping (yielding the core to anything else runnable): a reply
// expected within microseconds then does not pay for waking an idle core, which on a virtual
// machine can cost tens of microseconds. kDeadlineExceeded when no byte of a frame arrived in
// time (the stream is still at a frame boundary), kUnavailable when the peer closed or the time
// ran out inside a frame, kInvalidArgument for a zero or oversized length (the stream is then
// unusable: close it).
absl::StatusOr<ReceivedFrame> RecvFrame(int socket_fd, std::chrono::milliseconds timeout,
                                        std::chrono::microseconds spin = {});

// FrameReader reassembles frames from a non-blocking socket for an event loop: call
// ReadAvailable when the socket is readable, then take frames with Next until it returns
// nullopt; repeat. Not thread-safe.
class FrameReader {
 public:
  // Reads what the socket has (at most about one maximal frame ahead). kUnavailable when the
  // peer closed; frames that arrived before the close are still returned by Next.
  absl::Status ReadAvailable(int socket_fd);
  // The next complete frame, nullopt if none is complete yet, or kInvalidArgument for a zero or
  // oversized length prefix (the session must close).
  absl::StatusOr<std::optional<std::string>> Next();
  // Bytes received but not yet returned as frames (non-zero at close: a truncated frame).
  size_t buffered_bytes() const { return buffer_.size() - consumed_; }

 private:
  std::string buffer_;
  size_t consumed_ = 0;
};

}  // namespace strata
