// ControllerProcess runs a real strata-controller in a child process for integration tests: its
// config file is written from the options, the cluster API's port is found from its log, and a
// StrataCluster stub dials it. Not thread-safe.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "strata/v1/control.grpc.pb.h"
#include "tests/support/subprocess.h"

namespace strata::test_support {

struct ControllerProcessOptions {
  // "127.0.0.1:0" picks a free port; a fixed one lets a restarted controller take its place.
  std::string listen_address = "127.0.0.1:0";
  uint32_t instance_timeout_ms = 2'000;
  // controller.auth_token_file ("" : no token).
  std::string auth_token_file;
  // Appended to the generated config file (whole TOML tables).
  std::string extra_toml;
};

class ControllerProcess {
 public:
  // Starts strata-controller (path compiled in) and waits until it serves. kUnavailable with its
  // log when it does not come up within 10 s.
  static absl::StatusOr<std::unique_ptr<ControllerProcess>> Start(
      ControllerProcessOptions options = {});
  // Kills the controller if it still runs and removes its config.
  ~ControllerProcess();

  // "127.0.0.1:PORT", for daemons' [cluster] controllers and for stubs.
  const std::string& address() const { return address_; }
  v1::StrataCluster::Stub& cluster() { return *stub_; }
  std::string Log() const { return process_->Stderr(); }
  // SIGTERM and waits for the exit (SIGKILL after 10 s); the exit code (-1 when it had exited
  // already or was killed).
  int Stop();
  // SIGKILL and reap.
  void Kill();

 private:
  ControllerProcess() = default;

  std::string config_path_;
  std::unique_ptr<Subprocess> process_;
  std::string address_;
  std::unique_ptr<v1::StrataCluster::Stub> stub_;
};

}  // namespace strata::test_support
