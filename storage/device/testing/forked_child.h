// ForkedChild runs a function in a child process that holds one end of a Unix socketpair, over
// which the parent can pass descriptors (core/frame_io.h, SCM_RIGHTS): tests of memory that
// processes share. The child runs only `body` and _exits with its return value; it must not use
// anything that needs the parent's threads. Header-only, for tests; not thread-safe.
#pragma once

#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "core/scoped_fd.h"

namespace strata::storage::testing {

class ForkedChild {
 public:
  explicit ForkedChild(const std::function<int(int socket_fd)>& body) {
    int sockets[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(sockets[0]);
      ::_exit(body(sockets[1]));
    }
    ::close(sockets[1]);
    socket_ = ScopedFd(sockets[0]);
  }
  ~ForkedChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      Wait(std::chrono::seconds(10));
    }
  }
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;

  bool started() const { return pid_ > 0 && socket_.valid(); }
  // The parent's end of the socketpair.
  int socket() const { return socket_.get(); }
  void Kill(int signal_number) {
    if (pid_ > 0) ::kill(pid_, signal_number);
  }
  // The exit code, or 128 + the signal that killed it; -1 when it did not exit in time (it is
  // then killed) or was never started.
  int Wait(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return -1;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
  ScopedFd socket_;
};

}  // namespace strata::storage::testing
