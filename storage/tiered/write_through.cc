#include "storage/tiered/write_through.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/fmt_absl.h"
#include "spdlog/spdlog.h"
#include "storage/tiered/chunk_transfer.h"
#include "storage/tiered/host_forms.h"

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
    : disk_(disk),
      options_(options),
      worker_({.thread_name = "strata-wthrough",
               .max_batch = options.max_batch_chunks,
               .max_queued = options.max_queued_chunks,
               .on_stop = BackgroundWorkerOptions::OnStop::kDropQueued,  // best effort
               .nice = kBackgroundNice},
              [this](std::span<ChunkKey> keys) { WriteBatch(keys); }) {}

WriteThrough::~WriteThrough() { Stop(); }

void WriteThrough::Start(HostTier* host) {
  absl::MutexLock lock(&mu_);
  if (host_ == nullptr && !stopping_) host_ = host;
}

void WriteThrough::OnStored(const ChunkKey& key, const ChunkKey& /*parent*/,
                            uint32_t /*num_tokens*/, std::span<const uint32_t> /*token_ids*/) {
  absl::MutexLock lock(&mu_);
  if (host_ == nullptr || stopping_) return;
  ChunkKey queued = key;
  if (!worker_.Push(std::move(queued))) dropped_.fetch_add(1, std::memory_order_relaxed);
}

void WriteThrough::OnRemoved(const ChunkKey& key, RemovalCause cause) {
  // An evicted chunk is not leased (a lease protects it), so it is not being written: the
  // demoter demotes it, and a queued key of it misses its lease and is skipped.
  if (cause == RemovalCause::kEvicted) return;
  absl::MutexLock lock(&mu_);
  if (in_flight_.contains(key)) cancelled_.insert(key);
}

void WriteThrough::OnCleared() {
  absl::MutexLock lock(&mu_);
  cancelled_.insert(in_flight_.begin(), in_flight_.end());
  worker_.DropQueued();
}

void WriteThrough::Flush() { worker_.Flush(); }

void WriteThrough::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.Stop();
}

WriteThroughStats WriteThrough::Stats() const {
  return {.queued = worker_.pushed(),
          .written = written_.load(std::memory_order_relaxed),
          .skipped = skipped_.load(std::memory_order_relaxed),
          .dropped = dropped_.load(std::memory_order_relaxed),
          .failed = failed_.load(std::memory_order_relaxed),
          .cancelled = cancelled_count_.load(std::memory_order_relaxed),
          .pending = worker_.pending()};
}

void WriteThrough::WriteBatch(std::span<const ChunkKey> keys) {
  HostTier* host = nullptr;
  {
    // Marked in flight before they are leased: a removal from here on cancels the write.
    absl::MutexLock lock(&mu_);
    host = host_;
    in_flight_.insert(keys.begin(), keys.end());
  }
  WriteLeased(*host, keys);
  absl::MutexLock lock(&mu_);
  in_flight_.clear();
  cancelled_.clear();
}

void WriteThrough::WriteLeased(HostTier& host, std::span<const ChunkKey> keys) {
  std::vector<ChunkLease> leases;
  std::vector<std::string> tenants;  // each lease's, for the tier below's choice of form
  // A chunk the host tier holds encoded already ([host] codec) is written as it decodes.
  std::vector<std::vector<std::byte>> decoded;
  for (const ChunkKey& key : keys) {
    std::optional<ChunkLease> lease;
    if (!disk_->Contains(key)) {
      absl::StatusOr<std::optional<ChunkLease>> acquired =
          host.AcquireForCopy(key, options_.lease, Forms::kAny);
      if (acquired.ok()) lease = *std::move(acquired);
    }
    std::vector<std::byte> chunk;
    if (lease.has_value() && lease->encoding().encoded()) {
      absl::Status status = absl::FailedPreconditionError("no layouts to decode with");
      if (options_.layouts != nullptr) {
        // Each chunk of the batch is kept decoded until the batch is written: its own buffer.
        absl::StatusOr<std::span<const std::byte>> plain =
            DecodeHostChunk(*options_.layouts, key, lease->num_tokens(), lease->encoding(),
                            lease->payload(), chunk);
        status = plain.status();
      }
      if (!status.ok()) {
        spdlog::warn("write-through of chunk {} skipped: {}", key.ToString(), status);
        lease.reset();
      }
    }
    if (!lease.has_value()) {
      skipped_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    tenants.push_back(host.TenantOf(key));
    leases.push_back(*std::move(lease));
    decoded.push_back(std::move(chunk));
  }
  if (leases.empty()) return;

  std::vector<absl::InlinedVector<std::span<const std::byte>, 4>> parts(leases.size());
  std::vector<LowerTier::Put> puts;
  puts.reserve(leases.size());
  for (size_t i = 0; i < leases.size(); ++i) {
    const bool plain = decoded[i].empty();
    if (plain) {
      parts[i] = PayloadParts(leases[i].payload());
    } else {
      parts[i] = {std::span<const std::byte>(decoded[i])};
    }
    puts.push_back(
        {.key = leases[i].key(),
         .payload = parts[i],
         .payload_checksum = plain ? leases[i].checksum() : leases[i].encoding().decoded_checksum,
         .num_tokens = leases[i].num_tokens(),
         .tenant = tenants[i]});
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
