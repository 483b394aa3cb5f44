// SyncIoEngine performs each request with pread / pwrite inside Submit and queues its
// completion for Wait. The fallback where io_uring is unavailable, and the reference the
// io_uring engine is tested against. Not thread-safe (see io_engine.h).
#pragma once

#include <deque>

#include "storage/io/io_engine.h"

namespace strata::storage {

class SyncIoEngine final : public IoEngine {
 public:
  explicit SyncIoEngine(uint32_t queue_depth) : queue_depth_(queue_depth) {}

  std::string_view name() const override { return "sync"; }
  size_t queue_depth() const override { return queue_depth_; }
  size_t in_flight() const override { return done_.size(); }
  absl::Status Submit(std::span<const IoRequest> requests) override;
  absl::StatusOr<size_t> Wait(size_t min_completions, std::span<IoCompletion> out) override;
  absl::Status Fdatasync(int fd) override;
  // pread / pwrite pin nothing for long: accepted and ignored.
  absl::Status RegisterMemory(std::span<const std::span<std::byte>>) override {
    return absl::OkStatus();
  }

 private:
  uint32_t queue_depth_;
  std::deque<IoCompletion> done_;
};

}  // namespace strata::storage
