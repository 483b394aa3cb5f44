#include "tests/support/tcp_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

#include "fmt/format.h"

namespace strata::test_support {
namespace {

sockaddr_in Loopback(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// Copies what `from` has to `to`; false when either end is closed or failed.
bool Pump(int from, int to) {
  char buffer[64 * 1024];
  const ssize_t n = ::read(from, buffer, sizeof(buffer));
  if (n <= 0) return false;
  for (ssize_t sent = 0; sent < n;) {
    const ssize_t w = ::send(to, buffer + sent, static_cast<size_t>(n - sent), MSG_NOSIGNAL);
    if (w <= 0) return false;
    sent += w;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TcpRelay>> TcpRelay::Start(const std::string& target) {
  std::unique_ptr<TcpRelay> relay(new TcpRelay());
  const size_t colon = target.rfind(':');
  const std::string_view port = std::string_view(target).substr(colon + 1);
  if (colon == std::string::npos ||
      std::from_chars(port.data(), port.data() + port.size(), relay->target_port_).ec !=
          std::errc()) {
    return absl::InvalidArgumentError(fmt::format("relay target '{}' is not host:port", target));
  }
  relay->listener_.Reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address = Loopback(0);
  socklen_t length = sizeof(address);
  if (!relay->listener_.valid() ||
      ::bind(relay->listener_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(relay->listener_.get(), 64) != 0 ||
      ::getsockname(relay->listener_.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return absl::UnavailableError(fmt::format("relay listener: errno {}", errno));
  }
  relay->port_ = ntohs(address.sin_port);
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC) != 0) return absl::UnavailableError("relay: no pipe");
  relay->wake_read_.Reset(wake[0]);
  relay->wake_write_.Reset(wake[1]);
  relay->thread_ = std::thread([r = relay.get()] { r->Run(); });
  return relay;
}

TcpRelay::~TcpRelay() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  (void)::write(wake_write_.get(), "x", 1);
  thread_.join();
}

std::string TcpRelay::address() const { return fmt::format("127.0.0.1:{}", port_); }

void TcpRelay::Cut() {
  {
    absl::MutexLock lock(&mu_);
    cut_ = true;
    drop_pairs_ = true;
  }
  (void)::write(wake_write_.get(), "x", 1);
}

void TcpRelay::Resume() {
  absl::MutexLock lock(&mu_);
  cut_ = false;
}

void TcpRelay::Accept() {
  ScopedFd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!client.valid()) return;
  {
    absl::MutexLock lock(&mu_);
    if (cut_) return;  // closed at once
  }
  ScopedFd upstream(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const sockaddr_in address = Loopback(target_port_);
  if (!upstream.valid() || ::connect(upstream.get(), reinterpret_cast<const sockaddr*>(&address),
                                     sizeof(address)) != 0) {
    return;
  }
  pairs_.push_back({std::move(client), std::move(upstream)});
}

void TcpRelay::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (drop_pairs_) {
        pairs_.clear();
        drop_pairs_ = false;
      }
    }
    std::vector<pollfd> fds = {{wake_read_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}};
    for (const Pair& pair : pairs_) {
      fds.push_back({pair.client.get(), POLLIN, 0});
      fds.push_back({pair.upstream.get(), POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), 1'000) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) {
      char drained[64];
      (void)::read(wake_read_.get(), drained, sizeof(drained));
    }
    std::vector<bool> closed(pairs_.size(), false);
    for (size_t i = 0; i < pairs_.size(); ++i) {
      const pollfd& client = fds[2 + 2 * i];
      const pollfd& upstream = fds[3 + 2 * i];
      if (client.revents != 0 && !Pump(pairs_[i].client.get(), pairs_[i].upstream.get())) {
        closed[i] = true;
      }
      if (!closed[i] && upstream.revents != 0 &&
          !Pump(pairs_[i].upstream.get(), pairs_[i].client.get())) {
        closed[i] = true;
      }
    }
    for (size_t i = pairs_.size(); i-- > 0;) {
      if (closed[i]) pairs_.erase(pairs_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (fds[1].revents != 0) Accept();
  }
}

}  // namespace strata::test_support
