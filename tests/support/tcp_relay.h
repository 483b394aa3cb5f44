// TcpRelay: a loopback TCP relay for tests that must break a connection without stopping either
// end (a network cut): it listens on 127.0.0.1 (an ephemeral port) and relays every connection to
// `target`, byte for byte, both ways. Cut() closes every relayed connection and, until Resume(),
// closes new ones as they are accepted.
//
// Threading: one relay thread (poll); Cut, Resume and the destructor may be called from any
// thread. Ownership: owns its sockets; the destructor closes them and joins the thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/scoped_fd.h"

namespace strata::test_support {

class TcpRelay {
 public:
  // `target`: "127.0.0.1:port". kUnavailable when the listener cannot be made.
  static absl::StatusOr<std::unique_ptr<TcpRelay>> Start(const std::string& target);
  ~TcpRelay();

  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  // "127.0.0.1:port" to dial instead of the target.
  std::string address() const;
  void Cut();
  void Resume();

 private:
  struct Pair {
    ScopedFd client;
    ScopedFd upstream;
  };

  TcpRelay() = default;
  void Run();
  // Accepts one connection and pairs it with a new connection to the target (or closes it).
  void Accept();

  uint16_t target_port_ = 0;
  uint16_t port_ = 0;
  ScopedFd listener_;
  ScopedFd wake_read_, wake_write_;
  absl::Mutex mu_;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool drop_pairs_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Pair> pairs_;  // the relay thread's
  std::thread thread_;
};

}  // namespace strata::test_support
