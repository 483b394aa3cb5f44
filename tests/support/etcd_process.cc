#include "tests/support/etcd_process.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "fmt/format.h"

namespace strata::test_support {
namespace {

// A loopback port free now (the kernel's pick, released at once; etcd binds it a moment later).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace

bool EtcdProcess::Installed() { return ::access(kBinary, X_OK) == 0; }

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start() {
  std::unique_ptr<EtcdProcess> etcd(new EtcdProcess());
  char dir[] = "/tmp/strata-etcd-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  etcd->dir_ = dir;
  const int client_port = FreePort();
  const int peer_port = FreePort();
  const std::string client = fmt::format("http://127.0.0.1:{}", client_port);
  const std::string peer = fmt::format("http://127.0.0.1:{}", peer_port);
  etcd->endpoint_ = fmt::format("127.0.0.1:{}", client_port);
  etcd->process_ = std::make_unique<Subprocess>(
      std::vector<std::string>{kBinary, "--name", "strata-test", "--data-dir", etcd->dir_ + "/data",
                               "--listen-client-urls", client, "--advertise-client-urls", client,
                               "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                               "--initial-cluster", fmt::format("strata-test={}", peer)});
  const std::string serving =
      fmt::format("serving insecure client requests on {}", etcd->endpoint_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string log = etcd->Log();
    if (log.find(serving) != std::string::npos) return etcd;
    if (etcd->process_->Poll().has_value()) {
      return absl::UnavailableError(fmt::format("etcd exited during start-up:\n{}", log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::UnavailableError(fmt::format("etcd did not serve within 15 s:\n{}", etcd->Log()));
}

EtcdProcess::~EtcdProcess() {
  if (process_ != nullptr) process_->Kill(SIGKILL);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace strata::test_support
