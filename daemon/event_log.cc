#include "daemon/event_log.h"

#include <pthread.h>

#include <chrono>
#include <utility>

#include "core/check.h"
#include "fmt/format.h"

namespace strata::daemon {

EventLog::EventLog(size_t capacity)
    : capacity_(capacity),
      epoch_(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count())),
      notifier_([this] { NotifyLoop(); }) {
  STRATA_CHECK(capacity >= 1);
}

EventLog::~EventLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  notifier_.join();
  absl::MutexLock lock(&mu_);
  STRATA_CHECK_MSG(waiters_.empty(), "EventLog destroyed with a registered waiter");
}

void EventLog::NotifyLoop() {
  pthread_setname_np(pthread_self(), "strata-events");
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](EventLog* log)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return log->wake_pending_ || log->stopping_; },
          this));
      if (stopping_) return;
    }
    absl::MutexLock wake_lock(&wake_mu_);
    std::vector<Waiter*> woken;
    {
      absl::MutexLock lock(&mu_);
      wake_pending_ = false;
      woken.assign(waiters_.begin(), waiters_.end());
      waiters_.clear();
    }
    for (Waiter* waiter : woken) waiter->Wake();
  }
}

absl::StatusOr<EventLog::ReadResult> EventLog::Read(uint64_t from, size_t max_events,
                                                    Waiter* waiter) {
  absl::MutexLock lock(&mu_);
  const uint64_t oldest = ring_.empty() ? next_sequence_ : ring_.front().sequence;
  if (from < oldest || from > next_sequence_) {
    return absl::OutOfRangeError(fmt::format(
        "event {} is not available: this daemon run retains events {}..{}; list the chunks "
        "again (ListChunks) and watch from the next sequence",
        from, oldest, next_sequence_ - 1));
  }
  ReadResult result;
  for (size_t i = from - oldest; i < ring_.size() && result.events.size() < max_events; ++i) {
    result.events.push_back(ring_[i]);
  }
  result.next_sequence = from + result.events.size();
  if (result.events.empty() && waiter != nullptr) waiters_.insert(waiter);
  return result;
}

void EventLog::Unregister(Waiter* waiter) {
  absl::MutexLock wake_lock(&wake_mu_);
  absl::MutexLock lock(&mu_);
  waiters_.erase(waiter);
}

uint64_t EventLog::next_sequence() const {
  absl::MutexLock lock(&mu_);
  return next_sequence_;
}

void EventLog::Append(KvEvent event) {
  absl::MutexLock lock(&mu_);
  event.sequence = next_sequence_++;
  if (ring_.size() == capacity_) ring_.pop_front();
  ring_.push_back(std::move(event));
  if (!waiters_.empty()) wake_pending_ = true;
}

storage::ChunkObserver* EventLog::observer(storage::Tier tier) {
  STRATA_CHECK_MSG(tier == storage::Tier::kHost || tier == storage::Tier::kDisk,
                   "the event log records the host and disk tiers");
  return tier == storage::Tier::kHost ? &host_ : &disk_;
}

void EventLog::TierObserver::OnStored(const ChunkKey& key, const ChunkKey& parent,
                                      uint32_t num_tokens, std::span<const uint32_t> token_ids) {
  log_->Append({.type = KvEvent::Type::kStored,
                .tier = tier_,
                .key = key,
                .parent = parent,
                .num_tokens = num_tokens,
                .token_ids = {token_ids.begin(), token_ids.end()}});
}

void EventLog::TierObserver::OnRemoved(const ChunkKey& key, storage::RemovalCause cause) {
  log_->Append({.type = KvEvent::Type::kRemoved, .tier = tier_, .key = key, .cause = cause});
}

void EventLog::TierObserver::OnCleared() {
  log_->Append({.type = KvEvent::Type::kCleared, .tier = tier_});
}

}  // namespace strata::daemon
