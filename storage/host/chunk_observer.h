// ChunkObserver is told when chunks enter and leave a tier's index, in index order: the daemon
// turns these calls into KV events (ChunkStored / ChunkRemoved / Cleared). The host tier and the
// disk tier (DiskTierOptions::observer) tell one each.
//
// Threading: calls run on the thread that changed the index, with the tier's lock held, so they
// arrive in the order the index changed. An implementation must be quick, must not block and
// must not call the tier. Keys are valid only during the call.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/chunk_key.h"

namespace strata::storage {

enum class RemovalCause {
  kEvicted,  // the eviction policy chose it to make room
  kRemoved,  // Remove / RemoveIf
  kCorrupt,  // its checksum failed on a load
};

class ChunkObserver {
 public:
  virtual ~ChunkObserver() = default;

  // A chunk was committed. `parent` is the previous chunk of its chain (empty if unknown);
  // `token_ids` its tokens when the writer gave them (ReserveOptions::token_ids), else empty.
  virtual void OnStored(const ChunkKey& key, const ChunkKey& parent, uint32_t num_tokens,
                        std::span<const uint32_t> token_ids) = 0;
  // A committed chunk left the index.
  virtual void OnRemoved(const ChunkKey& key, RemovalCause cause) = 0;
  // Every chunk left the index at once (RemoveAll); no OnRemoved calls are made for them.
  virtual void OnCleared() = 0;
};

// Forwards every call to each of its observers, in the order given (not owned; each must
// outlive the fan-out's use).
class ChunkObserverFanout final : public ChunkObserver {
 public:
  explicit ChunkObserverFanout(std::vector<ChunkObserver*> observers)
      : observers_(std::move(observers)) {}

  void OnStored(const ChunkKey& key, const ChunkKey& parent, uint32_t num_tokens,
                std::span<const uint32_t> token_ids) override {
    for (ChunkObserver* o : observers_) o->OnStored(key, parent, num_tokens, token_ids);
  }
  void OnRemoved(const ChunkKey& key, RemovalCause cause) override {
    for (ChunkObserver* o : observers_) o->OnRemoved(key, cause);
  }
  void OnCleared() override {
    for (ChunkObserver* o : observers_) o->OnCleared();
  }

 private:
  const std::vector<ChunkObserver*> observers_;
};

}  // namespace strata::storage
