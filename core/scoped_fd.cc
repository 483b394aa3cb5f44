#include "core/scoped_fd.h"

#include <unistd.h>

namespace strata {

void ScopedFd::Reset(int fd) {
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

}  // namespace strata
