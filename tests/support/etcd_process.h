// EtcdProcess runs a real single-member etcd (Debian's etcd-server) on loopback for integration
// tests: free ports picked, a private data directory, killed and removed on destruction. Not
// thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "tests/support/subprocess.h"

namespace strata::test_support {

class EtcdProcess {
 public:
  // Where Debian installs it.
  static constexpr const char* kBinary = "/usr/bin/etcd";
  static bool Installed();

  // Starts etcd and waits until it serves clients. kUnavailable with its log when it does not
  // within 15 s.
  static absl::StatusOr<std::unique_ptr<EtcdProcess>> Start();
  ~EtcdProcess();

  // "127.0.0.1:PORT", its client endpoint.
  const std::string& endpoint() const { return endpoint_; }
  std::string Log() const { return process_->Stderr(); }

 private:
  EtcdProcess() = default;

  std::string dir_;
  std::string endpoint_;
  std::unique_ptr<Subprocess> process_;
};

}  // namespace strata::test_support
