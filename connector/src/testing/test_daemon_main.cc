// connector_test_daemon: runs TestDaemon (the daemon's real engine-session server over a small
// host tier, and over a disk tier of DISK_BYTES when that is given and not 0) on a socket path,
// for tests in other processes (the Python adapter's tests).
//   connector_test_daemon SOCKET_PATH [CAPACITY_BYTES [PAGE_BYTES [DISK_BYTES [POLICY
//                         [NODE_ID [ADMITTED_PEER,... [DEVICE_POOL_BYTES]]]]]]]
// NODE_ID gives the daemon a node identity (as a remote tier would; "" or "-": none) and the
// comma-separated node ids it admits as peers, for disaggregated-prefill tests.
// DEVICE_POOL_BYTES gives each layout a device pool (T0, host memory) of that many bytes in
// 16-token pages, for position-independent reuse.
// Prints "ready" on stdout once it listens; exits cleanly on SIGTERM, SIGINT or end of stdin.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "connector/src/testing/test_daemon.h"

namespace {
volatile sig_atomic_t stop_requested = 0;
void OnSignal(int) { stop_requested = 1; }
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s SOCKET_PATH [CAPACITY_BYTES [PAGE_BYTES [DISK_BYTES [POLICY "
                 "[NODE_ID [ADMITTED_PEER,... [DEVICE_POOL_BYTES]]]]]]]\n",
                 argv[0]);
    return 2;
  }
  strata::connector::testing::TestDaemonOptions options;
  if (argc > 2) options.capacity_bytes = std::strtoull(argv[2], nullptr, 10);
  if (argc > 3) options.page_bytes = static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10));
  if (argc > 4) options.disk_capacity_bytes = std::strtoull(argv[4], nullptr, 10);
  if (argc > 5 && std::string(argv[5]) != "-") options.policy = argv[5];
  if (argc > 6 && std::string(argv[6]) != "-") options.node_id = argv[6];
  if (argc > 7) {
    std::string peers = argv[7];
    for (size_t start = 0; start <= peers.size();) {
      const size_t comma = std::min(peers.find(',', start), peers.size());
      if (comma > start) options.admitted_peers.push_back(peers.substr(start, comma - start));
      start = comma + 1;
    }
  }
  if (argc > 8) options.device_pool_bytes = std::strtoull(argv[8], nullptr, 10);
  strata::connector::testing::TestDaemon daemon(options, argv[1]);
  if (absl::Status started = daemon.Start(); !started.ok()) {
    std::fprintf(stderr, "connector_test_daemon: %s\n", std::string(started.message()).c_str());
    return 1;
  }
  signal(SIGTERM, OnSignal);
  signal(SIGINT, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  std::printf("ready\n");
  std::fflush(stdout);
  while (!stop_requested) {
    pollfd in{.fd = STDIN_FILENO, .events = POLLIN, .revents = 0};
    if (::poll(&in, 1, 100) > 0) {
      char buffer[64];
      if (::read(STDIN_FILENO, buffer, sizeof(buffer)) <= 0) break;  // stdin closed
    }
  }
  daemon.Stop();
  return 0;
}
