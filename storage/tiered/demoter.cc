#include "storage/tiered/demoter.h"

#include <utility>
#include <vector>

#include "core/fmt_absl.h"
#include "spdlog/spdlog.h"
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
    : disk_(disk),
      options_(options),
      worker_(
          {.thread_name = "strata-demoter", .max_batch = options.max_batch_chunks},
          [this](std::span<Queued> batch) { WriteBatch(batch); },
          [this](std::span<Queued> dropped) { Unstage(dropped); }) {}

Demoter::~Demoter() { Stop(); }

void Demoter::Count(const absl::Status& status) {
  (status.ok() ? demoted_ : failed_).fetch_add(1, std::memory_order_relaxed);
}

void Demoter::OnEvicted(const ChunkKey& key, const PayloadView& payload, uint64_t checksum,
                        uint32_t num_tokens, std::string_view tenant,
                        const StoredEncoding& encoding) {
  // Written through, or promoted from disk and evicted again: keys name their content, so the
  // disk copy is this chunk and nothing needs writing.
  if (disk_->Contains(key)) {
    Count(absl::OkStatus());
    return;
  }
  if (!encoding.encoded()) {
    Demote(key, payload, checksum, num_tokens, tenant);
    return;
  }
  const KnownLayouts none;
  absl::Status decoded =
      WithChunkBytes(options_.layouts != nullptr ? *options_.layouts : none, key, num_tokens,
                     payload, checksum, encoding, [&](const PayloadView& chunk, uint64_t sum) {
                       Demote(key, chunk, sum, num_tokens, tenant);
                       return absl::OkStatus();
                     });
  if (!decoded.ok()) {
    spdlog::warn("demoter: evicted {} lost: {}", key.ToString(), decoded);
    Count(decoded);
  }
}

void Demoter::Demote(const ChunkKey& key, const PayloadView& payload, uint64_t checksum,
                     uint32_t num_tokens, std::string_view tenant) {
  const uint64_t payload_bytes = payload.size_bytes();
  const uint64_t staged_bytes = AlignUp(payload_bytes);
  bool queue = false;
  {
    absl::MutexLock lock(&mu_);
    if (staged_bytes_ + staged_bytes <= options_.max_queued_bytes) {
      staged_bytes_ += staged_bytes;
      queue = true;
    }
  }
  if (queue) {
    auto staged = std::make_shared<StagedPayload>();
    staged->bytes = AlignedBuffer(payload_bytes);
    staged->payload_bytes = payload_bytes;
    staged->checksum = checksum;
    staged->num_tokens = num_tokens;
    staged->tenant = tenant;
    payload.CopyTo(staged->bytes.span().first(payload_bytes));
    absl::MutexLock lock(&mu_);
    // Staged and queued at once (under mu_): a Flush that follows IsStaged waits for its write.
    Queued item{.key = key, .staged = staged};
    if (worker_.Push(std::move(item))) {
      staged_.insert_or_assign(key, std::move(staged));
      return;
    }
    staged_bytes_ -= staged_bytes;  // stopped meanwhile: written here instead
  }
  written_inline_.fetch_add(1, std::memory_order_relaxed);
  Count(PutPayload(*disk_, key, payload, checksum, num_tokens, tenant));
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

void Demoter::Flush() { worker_.Flush(); }

uint64_t Demoter::Discard(absl::FunctionRef<bool(const ChunkKey&)> doomed) {
  return worker_.DropQueuedIf([&](const Queued& queued) { return doomed(queued.key); });
}

void Demoter::SetHeld(bool held) { worker_.SetHeld(held); }

void Demoter::Stop() { worker_.Stop(); }

void Demoter::WriteBatch(std::span<Queued> batch) {
  std::vector<std::span<const std::byte>> parts;
  parts.reserve(batch.size());
  std::vector<LowerTier::Put> puts;
  puts.reserve(batch.size());
  for (const Queued& item : batch) parts.push_back(item.staged->payload());
  for (size_t i = 0; i < batch.size(); ++i) {
    puts.push_back({.key = batch[i].key,
                    .payload = std::span(&parts[i], 1),
                    .payload_checksum = batch[i].staged->checksum,
                    .num_tokens = batch[i].staged->num_tokens,
                    .tenant = batch[i].staged->tenant});
  }
  for (const absl::Status& status : disk_->PutBatch(puts)) Count(status);
  // Written (the disk tier shows them now) or failed.
  Unstage(batch);
}

void Demoter::Unstage(std::span<const Queued> items) {
  absl::MutexLock lock(&mu_);
  // No longer staged, unless evicted again meanwhile. A reader holding a buffer keeps it alive
  // past the budget; the budget bounds what the demoter holds.
  for (const Queued& item : items) {
    auto it = staged_.find(item.key);
    if (it != staged_.end() && it->second == item.staged) staged_.erase(it);
    staged_bytes_ -= item.staged->bytes.size();
  }
}

}  // namespace strata::storage
