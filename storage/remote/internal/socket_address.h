// "host:port" text to socket addresses and back, for the transport's listener and its dials.
// Pure functions; thread-safe.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strata::storage::remote::internal {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  const struct sockaddr* address() const {
    return reinterpret_cast<const struct sockaddr*>(&storage);
  }
};

// "127.0.0.1:7000", "[::1]:7000", "node-3:7000" (resolved now; the first address wins), "0.0.0.0:0"
// (any address, a port the OS picks). kInvalidArgument for text that is not host:port or a port
// outside 0..65535; kUnavailable for a name that does not resolve.
absl::StatusOr<SocketAddress> ParseSocketAddress(std::string_view text);

// Opens and closes a TCP connection to `address` within `timeout`: OK when something listens
// there, kUnavailable (with the errno's text) when nothing does, kDeadlineExceeded when nothing
// answers in time.
absl::Status ProbeTcp(const SocketAddress& address, std::chrono::milliseconds timeout);

// "127.0.0.1:7000" or "[::1]:7000"; "?" for a family other than IPv4 and IPv6.
std::string FormatSocketAddress(const sockaddr_storage& address);

}  // namespace strata::storage::remote::internal
