#include "storage/tiered/write_through.h"

#include <pthread.h>

#include <optional>
#include <utility>
#include <vector>

#include "core/fmt_absl.h"
#include "spdlog/spdlog.h"
#include "storage/tiered/chunk_transfer.h"

namespace strata::storage {

absl::StatusOr<std::unique_ptr<WriteThrough>> WriteThrough::Create(
    LowerTier* disk, const WriteThroughOptions& options) {
  if (disk == nullptr) return absl::InvalidArgumentError("write-through: no lower tier");
  if (options.max_queued_chunks == 0 || options.max_batch_chunks == 0 ||
      options.lease.count() <= 0) {
    return absl::InvalidArgumentError(
        "write-through: max_queued_chunks, max_batch_chunks and lease must be positive");
  }
  return std::unique_ptr<WriteThrough>(new WriteThrough(disk, options));
}

WriteThrough::WriteThrough(LowerTier* disk, const WriteThroughOptions& options)
    : disk_(disk), options_(options) {}

WriteThrough::~WriteThrough() { Stop(); }

void WriteThrough::Start(HostTier* host) {
  absl::MutexLock lock(&mu_);
  if (started_ || stopping_ || host == nullptr) return;
  host_ = host;
  started_ = true;
  worker_ = std::jthread([this] { Run(); });
}

void WriteThrough::OnStored(const ChunkKey& key, const ChunkKey& /*parent*/,
                            uint32_t /*num_tokens*/, std::span<const uint32_t> /*token_ids*/) {
  absl::MutexLock lock(&mu_);
  if (!started_ || stopping_) return;
  if (queue_.size() >= options_.max_queued_chunks) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  queue_.push_back(key);
  ++enqueued_;
}

void WriteThrough::OnRemoved(const ChunkKey& key, RemovalCause cause) {
  // An evicted chunk is not leased (a lease protects it), so it is not being written: the mover
  // demotes it, and a queued key of it misses its lease and is skipped.
  if (cause == RemovalCause::kEvicted) return;
  absl::MutexLock lock(&mu_);
  if (in_flight_.contains(key)) cancelled_.insert(key);
}

void WriteThrough::OnCleared() {
  absl::MutexLock lock(&mu_);
  cancelled_.insert(in_flight_.begin(), in_flight_.end());
  finished_ += queue_.size();
  queue_.clear();
}

void WriteThrough::Flush() {
  absl::MutexLock lock(&mu_);
  struct Arg {
    WriteThrough* self;
    uint64_t target;
  } arg{this, enqueued_};
  mu_.Await(absl::Condition(
      +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->self->finished_ >= a->target; },
      &arg));
}

void WriteThrough::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_) {
      stopping_ = true;
      finished_ += queue_.size();
      queue_.clear();
    }
  }
  if (worker_.joinable()) worker_.join();
}

WriteThroughStats WriteThrough::Stats() const {
  WriteThroughStats stats{.written = written_.load(std::memory_order_relaxed),
                          .skipped = skipped_.load(std::memory_order_relaxed),
                          .dropped = dropped_.load(std::memory_order_relaxed),
                          .failed = failed_.load(std::memory_order_relaxed),
                          .cancelled = cancelled_count_.load(std::memory_order_relaxed)};
  absl::MutexLock lock(&mu_);
  stats.queued = enqueued_;
  stats.pending = enqueued_ - finished_;
  return stats;
}

void WriteThrough::Run() {
  pthread_setname_np(pthread_self(), "strata-wthrough");
  for (;;) {
    std::vector<ChunkKey> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WriteThrough* w)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return !w->queue_.empty() || w->stopping_; },
          this));
      if (stopping_) return;
      while (!queue_.empty() && batch.size() < options_.max_batch_chunks) {
        in_flight_.insert(queue_.front());
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    WriteBatch(batch);
    absl::MutexLock lock(&mu_);
    in_flight_.clear();
    cancelled_.clear();
    finished_ += batch.size();
  }
}

void WriteThrough::WriteBatch(std::span<const ChunkKey> keys) {
  std::vector<ChunkLease> leases;
  for (const ChunkKey& key : keys) {
    std::optional<ChunkLease> lease;
    if (!disk_->Contains(key)) {
      absl::StatusOr<std::optional<ChunkLease>> acquired =
          host_->AcquireForCopy(key, options_.lease);
      if (acquired.ok()) lease = *std::move(acquired);
    }
    if (!lease.has_value()) {
      skipped_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    leases.push_back(*std::move(lease));
  }
  if (leases.empty()) return;

  std::vector<absl::InlinedVector<std::span<const std::byte>, 4>> parts(leases.size());
  std::vector<LowerTier::Put> puts;
  puts.reserve(leases.size());
  for (size_t i = 0; i < leases.size(); ++i) {
    parts[i] = PayloadParts(leases[i].payload());
    puts.push_back({.key = leases[i].key(),
                    .payload = parts[i],
                    .payload_checksum = leases[i].checksum(),
                    .num_tokens = leases[i].num_tokens()});
  }
  const std::vector<absl::Status> results = disk_->PutBatch(puts);

  for (size_t i = 0; i < leases.size(); ++i) {
    if (!results[i].ok()) {
      failed_.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("write-through of chunk {} failed: {}", leases[i].key().ToString(), results[i]);
      continue;
    }
    bool cancelled = leases[i].expired();
    {
      absl::MutexLock lock(&mu_);
      cancelled = cancelled || cancelled_.contains(leases[i].key());
    }
    if (!cancelled) {
      written_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    cancelled_count_.fetch_add(1, std::memory_order_relaxed);
    if (absl::StatusOr<bool> removed = disk_->Remove(leases[i].key()); !removed.ok()) {
      spdlog::warn("write-through: could not undo the write of removed chunk {}: {}",
                   leases[i].key().ToString(), removed.status());
    }
  }
}

}  // namespace strata::storage
