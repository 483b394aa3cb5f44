// DaemonProcess runs a real stratad in a child process for integration tests: a private
// directory holds its sockets and config, gRPC reaches it on an ephemeral TCP port found from
// its log, and Stop() delivers SIGTERM and reports how it exited. Not thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::test_support {

struct DaemonProcessOptions {
  std::string host_capacity = "64MiB";
  std::string page_bytes = "64KiB";
  uint32_t lease_ms = 30'000;
  // host.prefault (a prefaulted arena is registered with the disk tier's io engines).
  bool prefault = false;
  // host.background_prefault.
  bool background_prefault = true;
  // control.event_ring_capacity; 0: the daemon's default.
  uint32_t event_ring_capacity = 0;
  // Empty: engine.sock in the daemon's private directory.
  std::string engine_socket;
  std::vector<std::string> extra_args;
  // Appended to the generated config file (whole TOML tables, e.g. "[disk]\n...").
  std::string extra_toml;
  // A network namespace made with `ip netns add` (its name) to run the daemon in; empty: the
  // test's own. The control stub then dials the daemon's Unix control socket.
  std::string network_namespace;
  // How long Start waits for it to serve (a prefaulted arena of gigabytes takes a while).
  std::chrono::seconds start_timeout{10};
};

struct ExitInfo {
  bool exited = false;  // false: killed by a signal
  int code = -1;        // exit status, or the signal number
  std::chrono::milliseconds stop_time{0};
};

class DaemonProcess {
 public:
  // Starts stratad (path compiled in) and waits until it serves. kUnavailable with its log when
  // it does not come up within 10 s.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(DaemonProcessOptions options = {});
  // Kills the daemon if it still runs and removes its directory.
  ~DaemonProcess();

  const std::string& engine_socket() const { return engine_socket_; }
  const std::filesystem::path& dir() const { return dir_; }
  pid_t pid() const { return pid_; }
  v1::StrataControl::Stub& control() { return *stub_; }
  // The gRPC target control() dials ("127.0.0.1:PORT", or "unix:PATH" in another namespace).
  const std::string& control_target() const { return control_target_; }
  std::string Log() const;

  // SIGTERM, then waits up to `timeout` for the exit (SIGKILL after it).
  ExitInfo Stop(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // SIGKILL and reap.
  void Kill();

  // Convenience: the host tier's stats through gRPC.
  absl::StatusOr<v1::TierStats> HostStats();

 private:
  DaemonProcess() = default;

  std::filesystem::path dir_;
  std::string engine_socket_;
  pid_t pid_ = -1;
  std::string control_target_;
  std::unique_ptr<v1::StrataControl::Stub> stub_;
};

}  // namespace strata::test_support
