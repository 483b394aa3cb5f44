// IoEnginePool lends IoEngines to threads, one thread per engine at a time (io_engine.h), making
// one when none is idle; engines go back to the pool when their lease ends. It also keeps the
// memory registration (IoEngine::RegisterMemory) of all its engines the same: each engine is
// registered with the pool's current regions before it is lent (an engine made by Acquire
// pays the registration, which pins the regions' pages, in that Acquire).
//
// Thread-safe. The pool owns its engines; a Lease must end before the pool is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/io/io_engine.h"

namespace strata::storage {

class IoEnginePool {
 public:
  using MakeEngine = std::function<absl::StatusOr<std::unique_ptr<IoEngine>>()>;

  // An engine lent to the calling thread; back to the pool on destruction.
  class Lease {
   public:
    Lease(Lease&& other) noexcept = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    IoEngine& operator*() const { return *engine_; }
    IoEngine* operator->() const { return engine_.get(); }

   private:
    friend class IoEnginePool;
    Lease(IoEnginePool* pool, std::unique_ptr<IoEngine> engine, uint64_t registration)
        : pool_(pool), engine_(std::move(engine)), registration_(registration) {}

    IoEnginePool* pool_;
    std::unique_ptr<IoEngine> engine_;
    uint64_t registration_;  // the pool's registration the engine holds
  };

  explicit IoEnginePool(MakeEngine make_engine) : make_engine_(std::move(make_engine)) {}
  IoEnginePool(const IoEnginePool&) = delete;
  IoEnginePool& operator=(const IoEnginePool&) = delete;

  // An idle engine, or a new one (make_engine's error when it fails), registered with the
  // current regions. An engine whose registration the kernel refuses is lent unregistered (it
  // serves every request); the first such refusal after each RegisterMemory is logged.
  absl::StatusOr<Lease> Acquire();

  // Makes `regions` the registration of every engine, in place of earlier regions (none:
  // unregisters; a no-op when none are registered). Idle engines are registered now, and one is
  // made if the pool has none; lent engines are registered when next lent. The caller keeps the
  // regions mapped until it registers others or destroys the pool. Returns the first error of
  // the engines registered now (the kernel refused: see IoEngine::RegisterMemory) or of making
  // one; the pool works either way, its engines then transfer without registered buffers.
  absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions);

 private:
  struct Idle {
    std::unique_ptr<IoEngine> engine;
    uint64_t registration = 0;
  };

  // Registers `engine` with the current regions when `registration` is older (logging the
  // first refusal); returns the registration the engine holds afterwards.
  uint64_t Refresh(IoEngine& engine, uint64_t registration);

  const MakeEngine make_engine_;
  absl::Mutex mu_;
  std::vector<Idle> idle_ ABSL_GUARDED_BY(mu_);
  std::vector<std::span<std::byte>> regions_ ABSL_GUARDED_BY(mu_);
  // Bumped by every RegisterMemory; 0: nothing was ever registered.
  uint64_t registration_ ABSL_GUARDED_BY(mu_) = 0;
  bool refusal_logged_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace strata::storage
