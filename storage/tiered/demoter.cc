#include "storage/tiered/demoter.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "storage/tiered/chunk_transfer.h"

namespace strata::storage {

absl::StatusOr<std::unique_ptr<Demoter>> Demoter::Create(LowerTier* disk,
                                                         const DemoterOptions& options) {
  if (disk == nullptr) return absl::InvalidArgumentError("demoter: no lower tier");
  if (options.max_batch_chunks == 0) {
    return absl::InvalidArgumentError("demoter: max_batch_chunks must be at least 1");
  }
  return std::unique_ptr<Demoter>(new Demoter(disk, options));
}

Demoter::Demoter(LowerTier* disk, const DemoterOptions& options)
    : disk_(disk), options_(options), worker_([this] { Run(); }) {}

Demoter::~Demoter() { Stop(); }

void Demoter::Count(const absl::Status& status) {
  (status.ok() ? demoted_ : failed_).fetch_add(1, std::memory_order_relaxed);
}

void Demoter::OnEvicted(const ChunkKey& key, const PayloadView& payload, uint64_t checksum,
                        uint32_t num_tokens) {
  // Written through, or promoted from disk and evicted again: keys name their content, so the
  // disk copy is this chunk and nothing needs writing.
  if (disk_->Contains(key)) {
    Count(absl::OkStatus());
    return;
  }
  const uint64_t payload_bytes = payload.size_bytes();
  const uint64_t staged_bytes = AlignUp(payload_bytes);
  bool queue = false;
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_ && staged_bytes_ + staged_bytes <= options_.max_queued_bytes) {
      staged_bytes_ += staged_bytes;
      ++copying_;
      queue = true;
    }
  }
  if (!queue) {
    written_inline_.fetch_add(1, std::memory_order_relaxed);
    Count(PutPayload(*disk_, key, payload, checksum, num_tokens));
    return;
  }
  auto staged = std::make_shared<StagedPayload>();
  staged->bytes = AlignedBuffer(payload_bytes);
  staged->payload_bytes = payload_bytes;
  staged->checksum = checksum;
  staged->num_tokens = num_tokens;
  payload.CopyTo(staged->bytes.span().first(payload_bytes));
  absl::MutexLock lock(&mu_);
  staged_.insert_or_assign(key, staged);
  queue_.push_back({.key = key, .staged = std::move(staged)});
  --copying_;
  ++enqueued_;
}

std::shared_ptr<const StagedPayload> Demoter::FindStaged(const ChunkKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = staged_.find(key);
  return it == staged_.end() ? nullptr : it->second;
}

bool Demoter::IsStaged(const ChunkKey& key) const {
  absl::MutexLock lock(&mu_);
  return staged_.contains(key);
}

void Demoter::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = enqueued_;
  flush_target_ = std::max(flush_target_, target);
  struct Arg {
    Demoter* mover;
    uint64_t target;
  } arg{this, target};
  mu_.Await(absl::Condition(
      +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->mover->finished_ >= a->target; },
      &arg));
}

void Demoter::SetHeld(bool held) {
  absl::MutexLock lock(&mu_);
  held_ = held;
}

void Demoter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

void Demoter::Run() {
  pthread_setname_np(pthread_self(), "strata-demoter");
  for (;;) {
    std::vector<Queued> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Demoter* m) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            const bool write = !m->held_ || m->stopping_ || m->flush_target_ > m->finished_;
            return (!m->queue_.empty() && write) || (m->stopping_ && m->copying_ == 0);
          },
          this));
      // Stopping: a copy in progress still lands in the queue, so leave only when none is.
      if (queue_.empty()) return;
      while (!queue_.empty() && batch.size() < options_.max_batch_chunks) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    std::vector<std::span<const std::byte>> parts;
    parts.reserve(batch.size());
    std::vector<LowerTier::Put> puts;
    uint64_t batch_staged_bytes = 0;
    for (const Queued& item : batch) {
      parts.push_back(item.staged->payload());
      batch_staged_bytes += item.staged->bytes.size();
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      puts.push_back({.key = batch[i].key,
                      .payload = std::span(&parts[i], 1),
                      .payload_checksum = batch[i].staged->checksum,
                      .num_tokens = batch[i].staged->num_tokens});
    }
    for (const absl::Status& status : disk_->PutBatch(puts)) Count(status);
    absl::MutexLock lock(&mu_);
    // Written (the disk tier shows them now) or failed: no longer staged, unless evicted again
    // meanwhile. A reader holding a buffer keeps it alive past the budget; the budget bounds
    // what the mover holds.
    for (const Queued& item : batch) {
      auto it = staged_.find(item.key);
      if (it != staged_.end() && it->second == item.staged) staged_.erase(it);
    }
    batch.clear();
    staged_bytes_ -= batch_staged_bytes;
    finished_ += puts.size();
  }
}

}  // namespace strata::storage
