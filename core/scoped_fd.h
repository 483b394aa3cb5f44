// ScopedFd owns a file descriptor and closes it on destruction. Move-only; not thread-safe.
#pragma once

#include <utility>

namespace strata {

class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.Release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing; returns the descriptor (or -1).
  int Release() { return std::exchange(fd_, -1); }
  // Closes the owned descriptor, if any, and takes ownership of `fd`.
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace strata
