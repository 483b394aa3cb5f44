#include "storage/tiered/promoter.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "storage/tiered/chunk_transfer.h"

namespace strata::storage {

absl::StatusOr<std::unique_ptr<Promoter>> Promoter::Create(std::vector<LowerTier*> lower,
                                                           HostTier* host,
                                                           const PromoterOptions& options) {
  if (lower.empty() || std::ranges::find(lower, nullptr) != lower.end() || host == nullptr) {
    return absl::InvalidArgumentError("promoter: needs lower tiers and a host tier");
  }
  if (options.max_queued_chunks == 0) {
    return absl::InvalidArgumentError("promoter: max_queued_chunks must be at least 1");
  }
  return std::unique_ptr<Promoter>(new Promoter(std::move(lower), host, options));
}

Promoter::Promoter(std::vector<LowerTier*> lower, HostTier* host, const PromoterOptions& options)
    : lower_(std::move(lower)),
      host_(host),
      options_(options),
      worker_(
          {.thread_name = "strata-promoter",
           .on_stop = BackgroundWorkerOptions::OnStop::kDropQueued,  // a prefetch is a hint
           .nice = kBackgroundNice},
          [this](std::span<Queued> batch) {
            for (const Queued& item : batch) Promote(item);
          },
          [this](std::span<Queued> dropped) {
            absl::MutexLock lock(&mu_);
            for (const Queued& item : dropped) pending_.erase(item.key);
          }) {}

Promoter::~Promoter() { Stop(); }

absl::StatusOr<uint32_t> Promoter::Enqueue(const KvLayout& layout,
                                           std::span<const ChunkKey> chain) {
  if (absl::Status status = layout.Validate(); !status.ok()) return status;
  const uint64_t fingerprint = layout.Fingerprint();
  for (const ChunkKey& key : chain) {
    if (key.layout_fingerprint() != fingerprint) {
      return absl::InvalidArgumentError(
          fmt::format("prefetch: key {} belongs to layout {:016x}, not {:016x}", key.ToString(),
                      key.layout_fingerprint(), fingerprint));
    }
  }
  // In memory only: the tiers' indexes, no disk I/O.
  const std::vector<Tier> tiers = LocatePrefix(*host_, lower_, chain, options_.staged);
  std::shared_ptr<const KvLayout> shared;
  uint32_t queued = 0;
  bool full = false;
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::FailedPreconditionError("prefetch: the promoter is stopped");
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] == Tier::kHost || pending_.contains(chain[i])) continue;
    if (pending_.size() >= options_.max_queued_chunks) {
      full = true;
      break;
    }
    if (shared == nullptr) shared = std::make_shared<const KvLayout>(layout);
    Queued item{.key = chain[i], .layout = shared};
    if (!worker_.Push(std::move(item))) break;  // not expected: Stop sets stopping_ first
    pending_.insert(chain[i]);
    ++queued;
  }
  if (full && queued == 0) {
    return absl::ResourceExhaustedError(
        fmt::format("prefetch: {} chunks are queued already; the limit is {}", pending_.size(),
                    options_.max_queued_chunks));
  }
  return queued;
}

bool Promoter::AwaitInFlight(const ChunkKey& key) {
  absl::MutexLock lock(&mu_);
  if (in_flight_ != key) return false;
  struct Arg {
    Promoter* promoter;
    const ChunkKey* key;
  } arg{this, &key};
  mu_.Await(absl::Condition(
      +[](Arg* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->promoter->in_flight_ != *a->key; },
      &arg));
  return true;
}

void Promoter::Flush() { worker_.Flush(); }

void Promoter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.Stop();
}

PromoterStats Promoter::Stats() const {
  PromoterStats stats;
  {
    absl::MutexLock lock(&mu_);
    stats.pending = pending_.size();
  }
  stats.queued = worker_.pushed();
  stats.promoted = promoted_.load(std::memory_order_relaxed);
  stats.skipped = skipped_.load(std::memory_order_relaxed);
  stats.failed = failed_.load(std::memory_order_relaxed);
  stats.pinned = pinned_.load(std::memory_order_relaxed);
  return stats;
}

void Promoter::PinPromoted(const ChunkKey& key, uint64_t max_chunk_bytes) {
  if (options_.pin_ttl.count() <= 0) return;
  const HostTierStats stats = host_->Stats();
  const double budget = options_.max_pinned_fraction * static_cast<double>(stats.capacity_bytes);
  if (static_cast<double>(stats.soft_pinned_bytes + max_chunk_bytes) > budget) return;
  // Gone again already (removed, or evicted before the pin): nothing to protect.
  if (host_->Pin(key, {.kind = PinKind::kSoft, .ttl = options_.pin_ttl}).ok()) {
    pinned_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Promoter::Promote(const Queued& item) {
  {
    absl::MutexLock lock(&mu_);
    in_flight_ = item.key;
  }
  // The nearest tier that holds it now: chunks move while they wait.
  LowerTier* source = FindBelow(lower_, options_.staged, item.key);
  const absl::StatusOr<PromoteOutcome> outcome =
      source == nullptr ? PromoteOutcome::kNotBelow
                        : PromoteChunk(*source, *host_, *item.layout, item.key, options_.staged);
  if (!outcome.ok()) {
    failed_.fetch_add(1, std::memory_order_relaxed);
  } else if (*outcome == PromoteOutcome::kPromoted) {
    promoted_.fetch_add(1, std::memory_order_relaxed);
    PinPromoted(item.key, item.layout->chunk_bytes(item.layout->chunk_tokens));
  } else {
    skipped_.fetch_add(1, std::memory_order_relaxed);
  }
  absl::MutexLock lock(&mu_);
  in_flight_.reset();
  pending_.erase(item.key);
}

}  // namespace strata::storage
