#include "storage/remote/internal/socket_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>

#include <cstring>

#include "core/scoped_fd.h"
#include "core/status_util.h"
#include "fmt/format.h"

namespace strata::storage::remote::internal {

absl::StatusOr<SocketAddress> ParseSocketAddress(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(fmt::format("address \"{}\" is not host:port", text));
  }
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  uint32_t port = 0;
  const bool digits = !port_text.empty() && port_text.size() <= 5 &&
                      port_text.find_first_not_of("0123456789") == std::string_view::npos;
  if (digits) port = static_cast<uint32_t>(std::stoul(std::string(port_text)));
  if (!digits || port > 65535) {
    return absl::InvalidArgumentError(
        fmt::format("address \"{}\": port \"{}\" is not 0..65535", text, port_text));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string host_string(host);
  const std::string port_string = std::to_string(port);
  const int error = ::getaddrinfo(host_string.c_str(), port_string.c_str(), &hints, &found);
  if (error != 0 || found == nullptr) {
    return absl::UnavailableError(fmt::format("address \"{}\": cannot resolve \"{}\": {}", text,
                                              host,
                                              error != 0 ? ::gai_strerror(error) : "no address"));
  }
  SocketAddress address;
  std::memcpy(&address.storage, found->ai_addr, found->ai_addrlen);
  address.length = found->ai_addrlen;
  ::freeaddrinfo(found);
  return address;
}

absl::Status ProbeTcp(const SocketAddress& address, std::chrono::milliseconds timeout) {
  const std::string name = FormatSocketAddress(address.storage);
  ScopedFd fd(::socket(address.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoToStatus(errno, fmt::format("probe {}: socket", name));
  if (::connect(fd.get(), address.address(), address.length) == 0) return absl::OkStatus();
  if (errno != EINPROGRESS) {
    return absl::UnavailableError(fmt::format("{}: {}", name, std::strerror(errno)));
  }
  pollfd waiting{.fd = fd.get(), .events = POLLOUT, .revents = 0};
  const int ready = ::poll(&waiting, 1, static_cast<int>(timeout.count()));
  if (ready == 0) {
    return absl::DeadlineExceededError(
        fmt::format("{}: no answer within {} ms", name, timeout.count()));
  }
  int error = 0;
  socklen_t error_length = sizeof(error);
  if (ready < 0) {
    error = errno;
  } else if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &error_length) != 0) {
    error = errno;
  }
  if (error != 0) return absl::UnavailableError(fmt::format("{}: {}", name, std::strerror(error)));
  return absl::OkStatus();
}

std::string FormatSocketAddress(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    return fmt::format("{}:{}", text, ntohs(v4.sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    return fmt::format("[{}]:{}", text, ntohs(v6.sin6_port));
  }
  return "?";
}

}  // namespace strata::storage::remote::internal
