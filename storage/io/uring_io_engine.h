// UringIoEngine runs requests on one io_uring ring that it owns. Not thread-safe: one thread
// uses it at a time (see io_engine.h); the ring is created without IORING_SETUP_SINGLE_ISSUER
// because DiskTier lends engines from a pool to whichever thread needs one.
//
// Registered buffers: RegisterMemory registers the regions as the ring's fixed buffers (split
// into buffers of at most max_buffer_bytes); a request wholly inside one of them is submitted as
// IORING_OP_READ_FIXED / WRITE_FIXED, any other as a plain read / write. Registering pins the
// regions' pages once per ring (30-100 ms per GiB of 4 KiB pages on the dev VM) instead of
// once per request: 2 MiB O_DIRECT reads took 50-60 instead of 185-195 us of CPU each.
// TODO(perf): share one registration among a pool's rings (IORING_REGISTER_CLONE_BUFFERS,
// Linux 6.12+; Debian's liburing 2.3 has no wrapper for it).
//
// Files are deliberately not registered. A registered file holds a reference to its open file:
// a compacted or evicted segment's blocks would stay allocated while any pool engine's table
// names it, and every engine would have to drop it before its fd is closed and the number
// reused. For that we found no gain: on the dev VM (O_DIRECT random reads, depth 32, 3 runs
// each) fixed files cost 4.4-5.5 us of CPU per 4 KiB read against 4.4-5.3 us plain, and
// 49-55 against 50-60 us per 2 MiB read with fixed buffers.
#pragma once

#include <liburing.h>

#include <memory>

#include "storage/io/io_engine.h"
#include "storage/io/registered_buffers.h"

namespace strata::storage {

class UringIoEngine final : public IoEngine {
 public:
  // Sets up a ring with `queue_depth` entries; the errno's status when the kernel refuses.
  // `max_buffer_bytes` bounds each registered buffer (tests lower it to exercise the split).
  static absl::StatusOr<std::unique_ptr<UringIoEngine>> Create(
      uint32_t queue_depth, uint64_t max_buffer_bytes = kMaxRegisteredBufferBytes);
  ~UringIoEngine() override;
  UringIoEngine(const UringIoEngine&) = delete;
  UringIoEngine& operator=(const UringIoEngine&) = delete;

  std::string_view name() const override { return "io_uring"; }
  size_t queue_depth() const override { return queue_depth_; }
  size_t in_flight() const override { return in_flight_; }
  absl::Status Submit(std::span<const IoRequest> requests) override;
  absl::StatusOr<size_t> Wait(size_t min_completions, std::span<IoCompletion> out) override;
  absl::Status Fdatasync(int fd) override;
  absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions) override;

  // The fixed buffers registered now (empty when none are, or the kernel refused them).
  const RegisteredBuffers& registered() const { return registered_; }
  // Requests submitted as READ_FIXED / WRITE_FIXED so far.
  uint64_t fixed_requests() const { return fixed_requests_; }

 private:
  UringIoEngine(uint32_t queue_depth, uint64_t max_buffer_bytes)
      : queue_depth_(queue_depth), max_buffer_bytes_(max_buffer_bytes) {}

  uint32_t queue_depth_;
  const uint64_t max_buffer_bytes_;
  size_t in_flight_ = 0;
  io_uring ring_{};
  RegisteredBuffers registered_;
  uint64_t fixed_requests_ = 0;
};

}  // namespace strata::storage
