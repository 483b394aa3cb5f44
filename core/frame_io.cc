#include "core/frame_io.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/clock.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"

namespace strata {
namespace {

using std::chrono::milliseconds;

// Milliseconds left until `deadline`, at least 0.
int RemainingMs(MonoTime deadline) {
  const auto left = deadline - SystemClock::Get()->Now();
  return left.count() <= 0 ? 0 : static_cast<int>(std::chrono::ceil<milliseconds>(left).count());
}

// Waits until `socket_fd` has `events` or the deadline passes.
absl::Status WaitFor(int socket_fd, short events, MonoTime deadline, std::string_view what) {
  for (;;) {
    pollfd pfd{.fd = socket_fd, .events = events, .revents = 0};
    const int n = ::poll(&pfd, 1, RemainingMs(deadline));
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::DeadlineExceededError(fmt::format("{}: timed out", what));
    if (errno != EINTR) return ErrnoToStatus(errno, what);
  }
}

uint32_t DecodeLength(const char* p) {
  const auto* b = reinterpret_cast<const uint8_t*>(p);
  return uint32_t{b[0]} | uint32_t{b[1]} << 8 | uint32_t{b[2]} << 16 | uint32_t{b[3]} << 24;
}

absl::Status CheckLength(uint32_t length) {
  if (length == 0 || length > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        fmt::format("frame length {} outside [1, {}]", length, kMaxFrameBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SendFrame(int socket_fd, std::string_view payload, milliseconds timeout,
                       std::span<const int> fds_to_pass) {
  if (payload.empty() || payload.size() > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        fmt::format("frame of {} bytes outside [1, {}]", payload.size(), kMaxFrameBytes));
  }
  if (fds_to_pass.size() > kMaxPassedFds) {
    return absl::InvalidArgumentError(
        fmt::format("frame with {} descriptors; at most {}", fds_to_pass.size(), kMaxPassedFds));
  }
  const MonoTime deadline = SystemClock::Get()->Now() + timeout;
  const uint32_t length = static_cast<uint32_t>(payload.size());
  char header[4] = {static_cast<char>(length & 0xff), static_cast<char>((length >> 8) & 0xff),
                    static_cast<char>((length >> 16) & 0xff),
                    static_cast<char>((length >> 24) & 0xff)};
  size_t sent = 0;
  const size_t total = sizeof(header) + payload.size();
  bool fds_attached = fds_to_pass.empty();
  while (sent < total) {
    iovec iov[2];
    int iov_count = 0;
    if (sent < sizeof(header)) {
      iov[iov_count++] = {header + sent, sizeof(header) - sent};
      iov[iov_count++] = {const_cast<char*>(payload.data()), payload.size()};
    } else {
      const size_t offset = sent - sizeof(header);
      iov[iov_count++] = {const_cast<char*>(payload.data()) + offset, payload.size() - offset};
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = iov_count;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
    if (!fds_attached) {
      const size_t fd_bytes = sizeof(int) * fds_to_pass.size();
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(fd_bytes);
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(fd_bytes);
      std::memcpy(CMSG_DATA(cmsg), fds_to_pass.data(), fd_bytes);
    }
    const ssize_t n = ::sendmsg(socket_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      fds_attached = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      absl::Status waited = WaitFor(socket_fd, POLLOUT, deadline, "send frame");
      if (!waited.ok()) return absl::UnavailableError(std::string(waited.message()));
      continue;
    }
    return absl::UnavailableError(
        fmt::format("send frame: {}", n < 0 ? std::strerror(errno) : "connection closed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReceivedFrame> RecvFrame(int socket_fd, milliseconds timeout,
                                        std::chrono::microseconds spin) {
  const MonoTime start = SystemClock::Get()->Now();
  const MonoTime deadline = start + timeout;
  const MonoTime spin_until = start + std::min<std::chrono::nanoseconds>(spin, timeout);
  ReceivedFrame frame;
  char header[4];
  size_t got = 0;
  size_t length = 0;
  std::string& payload = frame.payload;
  for (;;) {
    const bool in_header = got < sizeof(header);
    char* dest = in_header ? header + got : payload.data() + (got - sizeof(header));
    const size_t want = in_header ? sizeof(header) - got : length - (got - sizeof(header));
    iovec iov{dest, want};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(socket_fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n == 0) return absl::UnavailableError("receive frame: connection closed");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (SystemClock::Get()->Now() < spin_until) {
          ::sched_yield();
          continue;
        }
        absl::Status waited = WaitFor(socket_fd, POLLIN, deadline, "receive frame");
        if (!waited.ok() && got > 0) {
          // The stream stopped inside a frame: it is out of step, whatever the reason.
          return absl::UnavailableError(fmt::format("{} inside a frame ({} bytes of it read)",
                                                    std::string(waited.message()), got));
        }
        if (!waited.ok()) return waited;
        continue;
      }
      return absl::UnavailableError(fmt::format("receive frame: {}", std::strerror(errno)));
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          if (frame.passed_fds.size() < kMaxPassedFds) {
            frame.passed_fds.emplace_back(fd);
          } else {
            ScopedFd extra(fd);  // descriptors beyond the limit are closed
          }
        }
      }
    }
    got += static_cast<size_t>(n);
    if (got == sizeof(header) && length == 0) {
      length = DecodeLength(header);
      STRATA_RETURN_IF_ERROR(CheckLength(static_cast<uint32_t>(length)));
      payload.resize(length);
    }
    if (length != 0 && got == sizeof(header) + length) return frame;
  }
}

absl::Status FrameReader::ReadAvailable(int socket_fd) {
  if (consumed_ > 0) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  char chunk[64 * 1024];
  // Reads at most one maximal frame ahead; the event loop calls again after taking frames.
  while (buffer_.size() <= kMaxFrameBytes + 4) {
    const ssize_t n = ::recv(socket_fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return absl::UnavailableError("peer closed the session");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
    return absl::UnavailableError(fmt::format("receive: {}", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> FrameReader::Next() {
  const size_t available = buffer_.size() - consumed_;
  if (available < 4) return std::nullopt;
  const uint32_t length = DecodeLength(buffer_.data() + consumed_);
  STRATA_RETURN_IF_ERROR(CheckLength(length));
  if (available < 4 + size_t{length}) return std::nullopt;
  std::string frame = buffer_.substr(consumed_ + 4, length);
  consumed_ += 4 + length;
  return frame;
}

}  // namespace strata
