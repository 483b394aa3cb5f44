#include "storage/io/io_engine_pool.h"

#include <utility>

#include "core/fmt_absl.h"
#include "spdlog/spdlog.h"

namespace strata::storage {

IoEnginePool::Lease::~Lease() {
  if (engine_ == nullptr) return;
  absl::MutexLock lock(&pool_->mu_);
  pool_->idle_.push_back({std::move(engine_), registration_});
}

absl::StatusOr<IoEnginePool::Lease> IoEnginePool::Acquire() {
  Idle idle;
  {
    absl::MutexLock lock(&mu_);
    if (!idle_.empty()) {
      idle = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (idle.engine == nullptr) {
    absl::StatusOr<std::unique_ptr<IoEngine>> engine = make_engine_();
    if (!engine.ok()) return engine.status();
    idle.engine = std::move(engine).value();
  }
  const uint64_t registration = Refresh(*idle.engine, idle.registration);
  return Lease(this, std::move(idle.engine), registration);
}

uint64_t IoEnginePool::Refresh(IoEngine& engine, uint64_t registration) {
  std::vector<std::span<std::byte>> regions;
  uint64_t current = 0;
  {
    absl::MutexLock lock(&mu_);
    current = registration_;
    if (registration == current) return current;
    regions = regions_;
  }
  // A refused registration is not retried: the engine serves unregistered until the next one.
  const absl::Status status = engine.RegisterMemory(regions);
  if (!status.ok()) {
    absl::MutexLock lock(&mu_);
    if (!refusal_logged_) {
      refusal_logged_ = true;
      spdlog::warn("disk tier: io engine transfers without registered buffers: {}", status);
    }
  }
  return current;
}

absl::Status IoEnginePool::RegisterMemory(std::span<const std::span<std::byte>> regions) {
  std::vector<Idle> idle;
  uint64_t current = 0;
  {
    absl::MutexLock lock(&mu_);
    if (regions.empty() && regions_.empty()) return absl::OkStatus();  // nothing to undo
    regions_.assign(regions.begin(), regions.end());
    current = ++registration_;
    idle.swap(idle_);
  }
  absl::Status first_error;
  if (idle.empty()) {
    absl::StatusOr<std::unique_ptr<IoEngine>> engine = make_engine_();
    if (engine.ok()) {
      idle.push_back({std::move(engine).value(), 0});
    } else {
      first_error = engine.status();
    }
  }
  for (Idle& engine : idle) {
    const absl::Status status = engine.engine->RegisterMemory(regions);
    if (!status.ok() && first_error.ok()) first_error = status;
    engine.registration = current;
  }
  absl::MutexLock lock(&mu_);
  // The caller reports this call's refusal; later ones (engines lent now) are logged once.
  refusal_logged_ = !first_error.ok();
  for (Idle& engine : idle) idle_.push_back(std::move(engine));
  return first_error;
}

}  // namespace strata::storage
