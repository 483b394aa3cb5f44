#include "storage/io/sync_io_engine.h"

#include <unistd.h>

#include <cerrno>

#include "fmt/format.h"

namespace strata::storage {
namespace {

// One pread / pwrite, retried on EINTR; a short transfer is returned as is.
int64_t Transfer(const IoRequest& request) {
  for (;;) {
    const ssize_t n = request.op == IoOp::kRead
                          ? ::pread(request.fd, request.data, request.size_bytes,
                                    static_cast<off_t>(request.offset))
                          : ::pwrite(request.fd, request.data, request.size_bytes,
                                     static_cast<off_t>(request.offset));
    if (n >= 0) return n;
    if (errno != EINTR) return -errno;
  }
}

}  // namespace

absl::Status SyncIoEngine::Submit(std::span<const IoRequest> requests) {
  if (requests.size() + done_.size() > queue_depth_) {
    return absl::InvalidArgumentError(
        fmt::format("sync io: {} requests exceed the free queue depth {}", requests.size(),
                    queue_depth_ - done_.size()));
  }
  for (const IoRequest& request : requests) {
    done_.push_back(IoCompletion{.tag = request.tag, .result = Transfer(request)});
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> SyncIoEngine::Wait(size_t /*min_completions*/, std::span<IoCompletion> out) {
  size_t n = 0;
  while (n < out.size() && !done_.empty()) {
    out[n++] = done_.front();
    done_.pop_front();
  }
  return n;
}

absl::Status SyncIoEngine::Fdatasync(int fd) { return FdatasyncFd(fd); }

}  // namespace strata::storage
