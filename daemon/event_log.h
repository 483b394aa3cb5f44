// EventLog numbers the index changes of the host and disk tiers (the storage::ChunkObserver
// calls of observer(tier)) as KV events 1, 2, 3, ..., each tagged with its tier, and keeps the
// most recent `capacity` of them in a ring, for WatchEvents streams that start or resume from a
// sequence number. Each tier's events are in its index order; two tiers' events interleave as
// they happened.
//
// Thread-safety: every method is thread-safe. The observer calls arrive under a tier's lock and
// only append to the ring; waiters are woken on the log's own notifier thread
// ("strata-events"), never on the appending thread.
// Lock order: the notifier's wake lock, then a waiter's own locks, then the log's lock; a tier's
// lock, then the log's lock.
#pragma once

#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "storage/host/chunk_observer.h"
#include "storage/tiered/tier.h"

namespace strata::daemon {

struct KvEvent {
  enum class Type : uint8_t { kStored, kRemoved, kCleared };
  uint64_t sequence = 0;
  Type type = Type::kStored;
  storage::Tier tier = storage::Tier::kHost;
  ChunkKey key;                     // kStored, kRemoved
  ChunkKey parent;                  // kStored: the previous chunk of the chain, empty if unknown
  uint32_t num_tokens = 0;          // kStored
  std::vector<uint32_t> token_ids;  // kStored: the chunk's tokens when its writer sent them
  storage::RemovalCause cause = storage::RemovalCause::kRemoved;  // kRemoved
};

class EventLog final {
 public:
  // Woken (once per registration) when an event is appended after Read registered it.
  class Waiter {
   public:
    virtual ~Waiter() = default;
    // Runs on the notifier thread; may call Read.
    virtual void Wake() = 0;
  };

  struct ReadResult {
    std::vector<KvEvent> events;  // consecutive sequence numbers from `from`
    uint64_t next_sequence = 0;   // the sequence number to read from next
  };

  // `capacity` >= 1 events are retained. Starts the notifier thread.
  explicit EventLog(size_t capacity);
  // Stops the notifier thread. Every waiter must be unregistered.
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Up to `max_events` retained events with sequence >= `from`. kOutOfRange when `from` is
  // older than the oldest retained event (the ring dropped some: resynchronize with ListChunks)
  // or beyond next_sequence() (e.g. sequence numbers of an earlier daemon run). When there is
  // nothing to read yet and `waiter` is non-null, registers it to be woken by the next event.
  absl::StatusOr<ReadResult> Read(uint64_t from, size_t max_events, Waiter* waiter);
  // After this returns, `waiter` is never woken again (it may be woken while this runs).
  void Unregister(Waiter* waiter);
  // The sequence number the next event will get.
  uint64_t next_sequence() const;
  // Identifies this log (so the daemon run): its creation time in ns since the Unix epoch.
  uint64_t epoch() const { return epoch_; }

  // What the tier tells of its index changes (HostTierOptions::observer,
  // TieredDiskOptions::observer): kHost or kDisk. Valid for the log's life.
  storage::ChunkObserver* observer(storage::Tier tier);

 private:
  // Appends one tier's changes, tagged with the tier.
  class TierObserver final : public storage::ChunkObserver {
   public:
    TierObserver(EventLog* log, storage::Tier tier) : log_(log), tier_(tier) {}
    void OnStored(const ChunkKey& key, const ChunkKey& parent, uint32_t num_tokens,
                  std::span<const uint32_t> token_ids) override;
    void OnRemoved(const ChunkKey& key, storage::RemovalCause cause) override;
    void OnCleared() override;

   private:
    EventLog* const log_;
    const storage::Tier tier_;
  };

  void Append(KvEvent event);
  void NotifyLoop();

  TierObserver host_{this, storage::Tier::kHost};
  TierObserver disk_{this, storage::Tier::kDisk};
  const size_t capacity_;
  const uint64_t epoch_;
  // Held by the notifier while it wakes waiters, and by Unregister.
  absl::Mutex wake_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::deque<KvEvent> ring_ ABSL_GUARDED_BY(mu_);
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_set<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
  bool wake_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::jthread notifier_;  // last: started after everything it uses
};

}  // namespace strata::daemon
