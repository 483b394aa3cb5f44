#include "storage/io/testing/fault_injecting_io_engine.h"

#include <algorithm>

#include "core/status_macros.h"
#include "core/status_util.h"

namespace strata::storage {

void FaultPlan::FailNext(IoOp op, int count, int error_number) {
  absl::MutexLock lock(&mu_);
  (op == IoOp::kRead ? reads_ : writes_) = {{Kind::kError, error_number}, count};
}

void FaultPlan::ShortNext(IoOp op, int count) {
  absl::MutexLock lock(&mu_);
  (op == IoOp::kRead ? reads_ : writes_) = {{Kind::kShort, 0}, count};
}

void FaultPlan::FlipNextReads(int count) {
  absl::MutexLock lock(&mu_);
  reads_ = {{Kind::kFlipByte, 0}, count};
}

void FaultPlan::FailNextSyncs(int count, int error_number) {
  absl::MutexLock lock(&mu_);
  syncs_ = {{Kind::kError, error_number}, count};
}

void FaultPlan::Clear() {
  absl::MutexLock lock(&mu_);
  reads_ = writes_ = syncs_ = Armed{};
}

FaultPlan::Fault FaultPlan::Take(IoOp op) {
  absl::MutexLock lock(&mu_);
  Armed& armed = op == IoOp::kRead ? reads_ : writes_;
  if (armed.remaining <= 0) return Fault{};
  --armed.remaining;
  ++injected_;
  return armed.fault;
}

void FaultPlan::HoldSyncs() {
  absl::MutexLock lock(&mu_);
  hold_syncs_ = true;
}

void FaultPlan::ReleaseSyncs() {
  absl::MutexLock lock(&mu_);
  hold_syncs_ = false;
}

void FaultPlan::AwaitHeldSyncs(int count) {
  absl::MutexLock lock(&mu_);
  struct Arg {
    FaultPlan* plan;
    int count;
  } arg{this, count};
  mu_.Await(absl::Condition(
      +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->plan->held_syncs_ >= a->count; },
      &arg));
}

int FaultPlan::TakeSync() {
  absl::MutexLock lock(&mu_);
  if (hold_syncs_) {
    ++held_syncs_;
    mu_.Await(absl::Condition(
        +[](FaultPlan* p) ABSL_NO_THREAD_SAFETY_ANALYSIS { return !p->hold_syncs_; }, this));
    --held_syncs_;
  }
  if (syncs_.remaining <= 0) return 0;
  --syncs_.remaining;
  ++injected_;
  return syncs_.fault.error_number;
}

int64_t FaultPlan::injected() const {
  absl::MutexLock lock(&mu_);
  return injected_;
}

absl::Status FaultInjectingIoEngine::Submit(std::span<const IoRequest> requests) {
  if (requests.size() + in_flight() > queue_depth()) {
    return absl::InvalidArgumentError("fault-injecting io: requests exceed the free queue depth");
  }
  std::vector<IoRequest> forwarded;
  forwarded.reserve(requests.size());
  for (const IoRequest& request : requests) {
    const FaultPlan::Fault fault = plan_->Take(request.op);
    switch (fault.kind) {
      case FaultPlan::Kind::kNone:
        forwarded.push_back(request);
        break;
      case FaultPlan::Kind::kError:
        synthetic_.push_back({.tag = request.tag, .result = -fault.error_number});
        break;
      case FaultPlan::Kind::kShort: {
        IoRequest shortened = request;
        shortened.size_bytes =
            static_cast<uint32_t>(request.size_bytes / 2 / kIoAlignment * kIoAlignment);
        if (shortened.size_bytes == 0) {
          synthetic_.push_back({.tag = request.tag, .result = 0});
        } else {
          forwarded.push_back(shortened);
        }
        break;
      }
      case FaultPlan::Kind::kFlipByte:
        flips_[request.tag] = request.data;
        forwarded.push_back(request);
        break;
    }
  }
  return inner_->Submit(forwarded);
}

absl::StatusOr<size_t> FaultInjectingIoEngine::Wait(size_t min_completions,
                                                    std::span<IoCompletion> out) {
  size_t n = 0;
  while (n < out.size() && !synthetic_.empty()) {
    out[n++] = synthetic_.back();
    synthetic_.pop_back();
  }
  const size_t still_wanted = min_completions > n ? min_completions - n : 0;
  STRATA_ASSIGN_OR_RETURN(const size_t m, inner_->Wait(still_wanted, out.subspan(n)));
  for (size_t i = n; i < n + m; ++i) {
    auto it = flips_.find(out[i].tag);
    if (it == flips_.end()) continue;
    if (out[i].result > 0) *it->second = ~*it->second;
    flips_.erase(it);
  }
  return n + m;
}

absl::Status FaultInjectingIoEngine::Fdatasync(int fd) {
  if (const int error_number = plan_->TakeSync(); error_number != 0) {
    return ErrnoToStatus(error_number, "fdatasync (injected)");
  }
  return inner_->Fdatasync(fd);
}

}  // namespace strata::storage
