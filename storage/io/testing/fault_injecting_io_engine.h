// FaultInjectingIoEngine wraps an IoEngine and injects the failures the disk tier must survive,
// as scheduled by a shared FaultPlan: errors (EIO, ENOSPC, ...), short transfers, and a flipped
// byte in data read. For tests.
//
// Threading: the engine follows io_engine.h (one thread at a time). A FaultPlan is thread-safe
// and may be shared by many engines (a DiskTier's engine pool), so a test arms it once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "storage/io/io_engine.h"

namespace strata::storage {

class FaultPlan {
 public:
  enum class Kind : uint8_t { kNone, kError, kShort, kFlipByte };
  struct Fault {
    Kind kind = Kind::kNone;
    int error_number = 0;
  };

  // The next `count` requests of `op` fail with -error_number and transfer nothing.
  void FailNext(IoOp op, int count, int error_number);
  // The next `count` requests of `op` transfer half their bytes (rounded down to kIoAlignment).
  void ShortNext(IoOp op, int count);
  // The next `count` reads succeed but the first byte they deliver is inverted.
  void FlipNextReads(int count);
  // The next `count` Fdatasync calls fail with error_number.
  void FailNextSyncs(int count, int error_number);
  // Forgets every armed fault.
  void Clear();
  // Until ReleaseSyncs, every Fdatasync waits before it syncs (a test holds a write in flight).
  void HoldSyncs();
  void ReleaseSyncs();
  // Blocks until `count` Fdatasync calls are waiting on a hold.
  void AwaitHeldSyncs(int count);

  // Consumes and returns the fault for the next request of `op` (kNone when none is armed).
  Fault Take(IoOp op);
  // Waits while syncs are held, then consumes and returns the errno of the next failing sync,
  // or 0.
  int TakeSync();
  // Faults injected so far.
  int64_t injected() const;

 private:
  struct Armed {
    Fault fault;
    int remaining = 0;
  };
  mutable absl::Mutex mu_;
  Armed reads_ ABSL_GUARDED_BY(mu_);
  Armed writes_ ABSL_GUARDED_BY(mu_);
  Armed syncs_ ABSL_GUARDED_BY(mu_);
  bool hold_syncs_ ABSL_GUARDED_BY(mu_) = false;
  int held_syncs_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t injected_ ABSL_GUARDED_BY(mu_) = 0;
};

class FaultInjectingIoEngine final : public IoEngine {
 public:
  FaultInjectingIoEngine(std::unique_ptr<IoEngine> inner, std::shared_ptr<FaultPlan> plan)
      : inner_(std::move(inner)), plan_(std::move(plan)) {}

  std::string_view name() const override { return inner_->name(); }
  size_t queue_depth() const override { return inner_->queue_depth(); }
  size_t in_flight() const override { return inner_->in_flight() + synthetic_.size(); }
  absl::Status Submit(std::span<const IoRequest> requests) override;
  absl::StatusOr<size_t> Wait(size_t min_completions, std::span<IoCompletion> out) override;
  absl::Status Fdatasync(int fd) override;
  absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions) override {
    return inner_->RegisterMemory(regions);
  }

 private:
  std::unique_ptr<IoEngine> inner_;
  std::shared_ptr<FaultPlan> plan_;
  // Completions of requests that never reached the inner engine.
  std::vector<IoCompletion> synthetic_;
  // Tags of in-flight reads whose first delivered byte gets flipped -> their buffers.
  absl::flat_hash_map<uint64_t, std::byte*> flips_;
};

}  // namespace strata::storage
