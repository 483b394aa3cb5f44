#include "storage/io/uring_io_engine.h"

#include <cerrno>
#include <optional>

#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"

namespace strata::storage {

absl::StatusOr<std::unique_ptr<UringIoEngine>> UringIoEngine::Create(uint32_t queue_depth,
                                                                     uint64_t max_buffer_bytes) {
  if (max_buffer_bytes == 0 || max_buffer_bytes > kMaxRegisteredBufferBytes) {
    return absl::InvalidArgumentError(
        fmt::format("io_uring: max_buffer_bytes {} outside (0, 1 GiB]", max_buffer_bytes));
  }
  std::unique_ptr<UringIoEngine> engine(new UringIoEngine(queue_depth, max_buffer_bytes));
  io_uring_params params{};
  // Completions are reaped only in Wait, so task work may run lazily there.
  params.flags = IORING_SETUP_COOP_TASKRUN;
  int rc = io_uring_queue_init_params(queue_depth, &engine->ring_, &params);
  if (rc == -EINVAL) {  // kernels before 5.19 reject the flag
    params = io_uring_params{};
    rc = io_uring_queue_init_params(queue_depth, &engine->ring_, &params);
  }
  if (rc < 0) {
    engine->queue_depth_ = 0;  // nothing to tear down
    return ErrnoToStatus(-rc, "io_uring_queue_init");
  }
  return engine;
}

UringIoEngine::~UringIoEngine() {
  if (queue_depth_ == 0) return;
  // Buffers of requests still in flight belong to callers that are going away: wait them out so
  // the kernel never writes into freed memory.
  while (in_flight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring_, &cqe) < 0) break;
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
  }
  io_uring_queue_exit(&ring_);
}

absl::Status UringIoEngine::Submit(std::span<const IoRequest> requests) {
  if (requests.size() + in_flight_ > queue_depth_) {
    return absl::InvalidArgumentError(
        fmt::format("io_uring: {} requests exceed the free queue depth {}", requests.size(),
                    queue_depth_ - in_flight_));
  }
  if (requests.empty()) return absl::OkStatus();
  for (const IoRequest& request : requests) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      return absl::InternalError("io_uring: submission queue full below its queue depth");
    }
    const std::optional<uint16_t> buffer =
        registered_.empty() ? std::nullopt : registered_.Find(request.data, request.size_bytes);
    if (buffer.has_value()) ++fixed_requests_;
    if (request.op == IoOp::kRead) {
      if (buffer.has_value()) {
        io_uring_prep_read_fixed(sqe, request.fd, request.data, request.size_bytes, request.offset,
                                 *buffer);
      } else {
        io_uring_prep_read(sqe, request.fd, request.data, request.size_bytes, request.offset);
      }
    } else if (buffer.has_value()) {
      io_uring_prep_write_fixed(sqe, request.fd, request.data, request.size_bytes, request.offset,
                                *buffer);
    } else {
      io_uring_prep_write(sqe, request.fd, request.data, request.size_bytes, request.offset);
    }
    io_uring_sqe_set_data64(sqe, request.tag);
  }
  size_t submitted = 0;
  while (submitted < requests.size()) {
    const int rc = io_uring_submit(&ring_);
    if (rc < 0) {
      if (rc == -EINTR || rc == -EAGAIN) continue;
      // Entries already consumed by the kernel are in flight; count them so Wait reaps them.
      in_flight_ += submitted;
      return ErrnoToStatus(-rc, "io_uring_submit");
    }
    submitted += static_cast<size_t>(rc);
  }
  in_flight_ += submitted;
  return absl::OkStatus();
}

absl::StatusOr<size_t> UringIoEngine::Wait(size_t min_completions, std::span<IoCompletion> out) {
  const size_t wanted = std::min({min_completions, in_flight_, out.size()});
  size_t n = 0;
  while (n < out.size() && in_flight_ > 0) {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_peek_cqe(&ring_, &cqe);
    if (rc == -EAGAIN) {
      if (n >= wanted) break;
      rc = io_uring_wait_cqe(&ring_, &cqe);
    }
    if (rc == -EINTR) continue;
    if (rc < 0) return ErrnoToStatus(-rc, "io_uring_wait_cqe");
    out[n++] = IoCompletion{.tag = io_uring_cqe_get_data64(cqe), .result = cqe->res};
    io_uring_cqe_seen(&ring_, cqe);
    --in_flight_;
  }
  return n;
}

absl::Status UringIoEngine::Fdatasync(int fd) { return FdatasyncFd(fd); }

absl::Status UringIoEngine::RegisterMemory(std::span<const std::span<std::byte>> regions) {
  if (in_flight_ > 0) {
    return absl::FailedPreconditionError(
        fmt::format("io_uring: cannot register memory with {} requests in flight", in_flight_));
  }
  if (!registered_.empty()) {
    registered_ = RegisteredBuffers();
    const int rc = io_uring_unregister_buffers(&ring_);
    if (rc < 0) return ErrnoToStatus(-rc, "io_uring_unregister_buffers");
  }
  STRATA_ASSIGN_OR_RETURN(RegisteredBuffers buffers,
                          RegisteredBuffers::Build(regions, max_buffer_bytes_));
  if (buffers.empty()) return absl::OkStatus();
  const int rc = io_uring_register_buffers(&ring_, buffers.iovecs().data(),
                                           static_cast<unsigned>(buffers.iovecs().size()));
  if (rc < 0) {
    return ErrnoToStatus(
        -rc, fmt::format("io_uring_register_buffers ({} buffers)", buffers.iovecs().size()));
  }
  registered_ = std::move(buffers);
  return absl::OkStatus();
}

}  // namespace strata::storage
