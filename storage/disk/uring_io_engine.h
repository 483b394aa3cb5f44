// UringIoEngine runs requests on one io_uring ring that it owns. Not thread-safe: one thread
// uses it at a time (see io_engine.h); the ring is created without IORING_SETUP_SINGLE_ISSUER
// because DiskTier lends engines from a pool to whichever thread needs one.
//
// Buffers and files are not registered with the ring: the tier reads into caller-provided
// memory (arena pages) and opens segment files as it goes, so fixed-buffer / fixed-file tables
// would need re-registration per call. TODO(perf): register the arena once it is known.
#pragma once

#include <liburing.h>

#include <memory>

#include "storage/disk/io_engine.h"

namespace strata::storage {

class UringIoEngine final : public IoEngine {
 public:
  // Sets up a ring with `queue_depth` entries; the errno's status when the kernel refuses.
  static absl::StatusOr<std::unique_ptr<UringIoEngine>> Create(uint32_t queue_depth);
  ~UringIoEngine() override;
  UringIoEngine(const UringIoEngine&) = delete;
  UringIoEngine& operator=(const UringIoEngine&) = delete;

  std::string_view name() const override { return "io_uring"; }
  size_t queue_depth() const override { return queue_depth_; }
  size_t in_flight() const override { return in_flight_; }
  absl::Status Submit(std::span<const IoRequest> requests) override;
  absl::StatusOr<size_t> Wait(size_t min_completions, std::span<IoCompletion> out) override;
  absl::Status Fdatasync(int fd) override;

 private:
  explicit UringIoEngine(uint32_t queue_depth) : queue_depth_(queue_depth) {}

  uint32_t queue_depth_;
  size_t in_flight_ = 0;
  io_uring ring_{};
};

}  // namespace strata::storage
