#include "storage/tiered/tiered_store.h"

#include <utility>

#include "core/fmt_absl.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "storage/disk/disk_tier.h"
#include "storage/tiered/chunk_transfer.h"
#include "storage/tiered/demoter.h"
#include "storage/tiered/disk_lower_tier.h"
#include "storage/tiered/prefix_locator.h"
#include "storage/tiered/promoter.h"
#include "storage/tiered/task_thread.h"
#include "storage/tiered/write_through.h"

namespace strata::storage {
namespace {

absl::Status NoLongerCached(const ChunkKey& key) {
  return absl::AbortedError(
      fmt::format("chunk {} is no longer cached; redo the lookup", key.ToString()));
}

// Registers the host arena with the disk tier's io engines, so promotions and demotions skip
// pinning its pages per request. Every engine of the disk tier's pool pins the arena once, when
// it is made or at this call (30-100 ms per GiB of 4 KiB pages on the dev VM; far less with huge
// pages). A refusal is logged; the disk tier works without registered buffers.
void RegisterArena(HostTier& host, LowerTier& disk) {
  const std::span<std::byte> arena[] = {{host.arena_base(), host.arena_size_bytes()}};
  if (absl::Status status = disk.RegisterMemory(arena); !status.ok()) {
    spdlog::warn("disk tier: host arena not registered, transfers pin its pages per request: {}",
                 status);
    return;
  }
  spdlog::info("disk tier: host arena ({} MiB) registered with the io engines",
               host.arena_size_bytes() >> 20);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Create(TieredStoreOptions options) {
  if (options.host.listener != nullptr) {
    return absl::InvalidArgumentError(
        "tiered store: the host tier's eviction listener is the store's demoter; pass none");
  }
  std::unique_ptr<TieredStore> store(new TieredStore());
  std::vector<ChunkObserver*> observers;
  if (options.host.observer != nullptr) observers.push_back(options.host.observer);
  if (options.disk.has_value()) {
    const TieredDiskOptions& disk = *options.disk;
    absl::StatusOr<std::unique_ptr<DiskTier>> tier =
        DiskTier::Open({.directory = disk.directory,
                        .capacity_bytes = disk.capacity_bytes,
                        .segment_bytes = disk.segment_bytes});
    if (!tier.ok()) return Annotate(tier.status(), "disk tier");
    store->disk_tier_ = *std::move(tier);
    store->below_ = std::make_unique<DiskLowerTier>(store->disk_tier_.get());
    absl::StatusOr<std::unique_ptr<Demoter>> demoter =
        Demoter::Create(store->below_.get(), {.max_queued_bytes = disk.demotion_queue_bytes});
    if (!demoter.ok()) return Annotate(demoter.status(), "demoter");
    store->demoter_ = *std::move(demoter);
    options.host.listener = store->demoter_.get();
    if (disk.write_through) {
      absl::StatusOr<std::unique_ptr<WriteThrough>> write_through =
          WriteThrough::Create(store->below_.get(), {});
      if (!write_through.ok()) return Annotate(write_through.status(), "write-through");
      store->write_through_ = *std::move(write_through);
      observers.push_back(store->write_through_.get());
    }
  }
  if (observers.size() > 1) {
    store->observers_ = std::make_unique<ChunkObserverFanout>(observers);
    options.host.observer = store->observers_.get();
  } else {
    options.host.observer = observers.empty() ? nullptr : observers.front();
  }
  absl::StatusOr<std::unique_ptr<HostTier>> host = HostTier::Create(options.host);
  if (!host.ok()) return Annotate(host.status(), "host tier");
  store->host_ = *std::move(host);
  if (store->write_through_ != nullptr) store->write_through_->Start(store->host_.get());
  if (store->below_ != nullptr) {
    if (options.disk->register_arena) RegisterArena(*store->host_, *store->below_);
    absl::StatusOr<std::unique_ptr<Promoter>> promoter =
        Promoter::Create(store->below_.get(), store->host_.get(),
                         {.max_queued_chunks = options.disk->prefetch_queue_chunks,
                          .staged = store->demoter_.get()});
    if (!promoter.ok()) return Annotate(promoter.status(), "promoter");
    store->promoter_ = *std::move(promoter);
  }
  store->loads_ = std::make_unique<TaskThread>("strata-loads", kBackgroundNice);
  store->maintenance_ = std::make_unique<TaskThread>("strata-tiered");
  return store;
}

TieredStore::~TieredStore() { Stop(); }

void TieredStore::Stop() {
  if (stopped_.exchange(true)) return;
  // Loads and operators' tasks already accepted run to the end (their callbacks with them),
  // while the promoter, whose prefetch a load may wait for, still runs.
  loads_->Stop();
  maintenance_->Stop();
  // Queued prefetches are dropped; a promotion in progress finishes (its evictions reach the
  // demoter, still running).
  if (promoter_ != nullptr) promoter_->Stop();
  // Queued write-throughs are dropped (the chunks stay in the host tier, whose contents go with
  // the process); the batch in flight finishes.
  if (write_through_ != nullptr) write_through_->Stop();
  // Demotions queued so far reach the disk before the process goes; later ones run inline.
  if (demoter_ != nullptr) demoter_->Stop();
  // The arena is unmapped before the disk tier goes (members' order): unregister it, so no
  // later request into memory mapped at its addresses would use its pinned pages.
  if (below_ != nullptr) {
    if (absl::Status status = below_->RegisterMemory({}); !status.ok()) {
      spdlog::warn("disk tier: unregistering the host arena: {}", status);
    }
  }
}

std::vector<Tier> TieredStore::tiers() const {
  std::vector<Tier> tiers = {Tier::kHost};
  if (below_ != nullptr) tiers.push_back(Tier::kDisk);
  return tiers;
}

bool TieredStore::has(Tier tier) const {
  return tier == Tier::kHost || (below_ != nullptr && below_->tier() == tier);
}

bool TieredStore::has_lower_tiers() const { return below_ != nullptr; }

std::vector<Tier> TieredStore::LocatePrefix(std::span<const ChunkKey> chain) const {
  return storage::LocatePrefix(*host_, below_.get(), chain, demoter_.get());
}

std::vector<Tier> TieredStore::TiersOf(const ChunkKey& key) const {
  std::vector<Tier> tiers;
  if (host_->Contains(key)) tiers.push_back(Tier::kHost);
  if (HeldBelow(below_.get(), demoter_.get(), key)) tiers.push_back(Tier::kDisk);
  return tiers;
}

std::optional<LoadLeases> TieredStore::AcquireForLoad(std::shared_ptr<const KvLayout> layout,
                                                      std::vector<ChunkKey> keys,
                                                      const LoadOptions& options, LoadDone done) {
  LoadLeases leased;
  leased.leases.reserve(keys.size());
  for (const ChunkKey& key : keys) {
    absl::StatusOr<std::optional<ChunkLease>> acquired =
        host_->Acquire(key, options.lease, options.owner, options.reader_verifies);
    if (!acquired.ok()) {
      leased.failure = acquired.status();
      return leased;
    }
    if (!acquired->has_value()) {
      if (!HeldBelow(below_.get(), demoter_.get(), key)) {
        leased.failure = NoLongerCached(key);
        return leased;
      }
      break;  // the rest goes on the loads thread
    }
    leased.leases.push_back(std::move(**acquired));
  }
  if (leased.leases.size() == keys.size()) return leased;

  async_loads_.fetch_add(1, std::memory_order_relaxed);
  const bool accepted = loads_->Submit(
      [this, layout = std::move(layout), keys = std::move(keys), options,
       leased = std::move(leased), done = std::move(done)]() mutable {
        ContinueLoad(*layout, keys, options, leased);
        std::move(done)(std::move(leased));
      },
      /*urgent=*/true);
  if (accepted) return std::nullopt;
  // Stopped: the task (and the leases it held) is gone; nothing of the load is leased.
  LoadLeases refused;
  refused.failure = absl::UnavailableError("the tiered store is stopping");
  return refused;
}

void TieredStore::ContinueLoad(const KvLayout& layout, std::span<const ChunkKey> keys,
                               const LoadOptions& options, LoadLeases& leased) {
  // The chunks one batched promotion covered: keys [run_first, run_first + run.size()).
  size_t run_first = 0;
  std::vector<absl::StatusOr<PromoteOutcome>> run;
  auto acquire = [&](const ChunkKey& key) {
    return host_->Acquire(key, options.lease, options.owner, options.reader_verifies);
  };
  for (size_t i = leased.leases.size(); i < keys.size(); ++i) {
    const ChunkKey& key = keys[i];
    absl::StatusOr<std::optional<ChunkLease>> acquired = acquire(key);
    if (acquired.ok() && !acquired->has_value() && below_ != nullptr) {
      if (i >= run_first + run.size()) {
        // keys[i] is missing; the run goes on while the host tier lacks the chunks after it.
        size_t end = i + 1;
        while (end < keys.size() && end - i < kPromotionRunChunks && !host_->Contains(keys[end])) {
          ++end;
        }
        run_first = i;
        run = PromoteRun(*below_, *host_, layout, keys.subspan(i, end - i), demoter_.get());
      }
      const absl::StatusOr<PromoteOutcome>& promoted = run[i - run_first];
      if (!promoted.ok()) {
        leased.failure = promoted.status();
        return;
      }
      if (*promoted != PromoteOutcome::kNotBelow) {
        // The promoter holds the chunk's reservation for a prefetch: its commit is moments away.
        if (*promoted == PromoteOutcome::kInProgress) promoter_->AwaitInFlight(key);
        acquired = acquire(key);
      }
    }
    if (!acquired.ok()) {
      leased.failure = acquired.status();
      return;
    }
    if (!acquired->has_value()) {
      leased.failure = NoLongerCached(key);
      return;
    }
    leased.leases.push_back(std::move(**acquired));
    // Promoted by a run, whether the run began at this chunk or before it.
    if (i >= run_first && i < run_first + run.size() && run[i - run_first].ok() &&
        *run[i - run_first] == PromoteOutcome::kPromoted) {
      ++leased.promoted_chunks;
      load_promoted_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

absl::StatusOr<uint32_t> TieredStore::Prefetch(const KvLayout& layout,
                                               std::span<const ChunkKey> chain) {
  if (promoter_ == nullptr) return 0;
  return promoter_->Enqueue(layout, chain);
}

absl::StatusOr<MoveResult> TieredStore::Move(std::span<const ChunkKey> keys, Tier target,
                                             const KvLayout* layout) {
  if (!has(target)) {
    return absl::FailedPreconditionError(fmt::format("{} tier not configured", TierName(target)));
  }
  MoveResult result;
  const bool to_disk = target == Tier::kDisk;
  for (const ChunkKey& key : keys) {
    const bool in_host = host_->Contains(key);
    const bool on_disk = below_ != nullptr && below_->Contains(key);
    // Evicted and waiting for the demoter's write: on its way to disk, in neither tier's index.
    const bool staged = demoter_ != nullptr && demoter_->IsStaged(key);
    if (to_disk ? on_disk && !in_host : in_host && !on_disk && !staged) {
      ++result.already_in_target;
      continue;
    }
    if (!in_host && !on_disk && !staged) {
      ++result.missing_chunks;
      continue;
    }
    if (to_disk) {
      if (in_host) {
        // Written to disk first, then dropped from the host tier: never in neither.
        absl::StatusOr<bool> copied = CopyDown(*host_, *below_, key);
        if (!copied.ok()) return copied.status();
        if (!*copied) {  // evicted or removed meanwhile
          ++result.missing_chunks;
          continue;
        }
        if (absl::StatusOr<RemoveResult> removed = host_->Remove(key); !removed.ok()) {
          return removed.status();
        }
      } else {
        // Only staged: its write is forced, so the chunk is on disk once Move returns.
        demoter_->Flush();
        if (!below_->Contains(key)) {  // the write failed (counted by the demoter)
          ++result.missing_chunks;
          continue;
        }
      }
    } else {
      if (!in_host) {
        if (layout == nullptr) {
          return absl::InvalidArgumentError(
              "moving chunks from disk to the host tier needs the selector's layout");
        }
        absl::StatusOr<PromoteOutcome> promoted =
            PromoteChunk(*below_, *host_, *layout, key, demoter_.get());
        if (!promoted.ok()) return promoted.status();
        // Gone meanwhile, or another writer is storing it: the disk copy stays.
        if (*promoted == PromoteOutcome::kNotBelow || *promoted == PromoteOutcome::kInProgress) {
          ++result.missing_chunks;
          continue;
        }
      }
      // A staged copy would land on disk after the removal: let it land first.
      if (staged) demoter_->Flush();
      if (absl::StatusOr<bool> removed = below_->Remove(key); !removed.ok()) {
        return removed.status();
      }
    }
    ++result.moved_chunks;
  }
  return result;
}

absl::StatusOr<RemoveResult> TieredStore::Clear(const ClearSelection& selection,
                                                std::optional<Tier> tier) {
  if (tier.has_value() && !has(*tier)) {
    return absl::FailedPreconditionError(fmt::format("{} tier not configured", TierName(*tier)));
  }
  auto doomed = [&](const ChunkKey& key) {
    if (selection.keys.has_value()) return selection.keys->contains(key);
    return selection.layout_fingerprint == 0 ||
           key.layout_fingerprint() == selection.layout_fingerprint;
  };
  RemoveResult removed;
  if (!tier.has_value() || *tier == Tier::kHost) {
    if (selection.keys.has_value()) {
      for (const ChunkKey& key : *selection.keys) {
        absl::StatusOr<RemoveResult> one = host_->Remove(key);
        if (!one.ok()) return one.status();
        removed.chunks += one->chunks;
        removed.bytes += one->bytes;
      }
    } else if (selection.layout_fingerprint != 0) {
      removed = host_->RemoveIf(doomed);
    } else {
      removed = host_->RemoveAll();
    }
  }
  if (below_ != nullptr && (!tier.has_value() || *tier == Tier::kDisk)) {
    demoter_->Flush();
    absl::StatusOr<RemoveResult> from_disk = below_->RemoveIf(doomed);
    if (!from_disk.ok()) return from_disk.status();
    removed.chunks += from_disk->chunks;
    removed.bytes += from_disk->bytes;
  }
  return removed;
}

absl::StatusOr<uint64_t> TieredStore::FlushToLowerTiers() {
  if (below_ == nullptr) return 0;
  demoter_->Flush();
  uint64_t flushed = 0;
  ListChunksOptions page_options{.limit = 10000};
  while (true) {
    const ChunkPage page = host_->ListChunks(page_options);
    for (const ChunkInfo& info : page.chunks) {
      if (below_->Contains(info.key)) continue;
      absl::StatusOr<bool> copied = CopyDown(*host_, *below_, info.key);
      if (!copied.ok()) return copied.status();
      if (*copied) ++flushed;
    }
    if (page.next_cursor == 0) return flushed;
    page_options.cursor = page.next_cursor;
  }
}

bool TieredStore::Submit(absl::AnyInvocable<void() &&> task) {
  return maintenance_->Submit(std::move(task));
}

void TieredStore::Flush() {
  loads_->Flush();
  maintenance_->Flush();
  if (promoter_ != nullptr) promoter_->Flush();
  if (write_through_ != nullptr) write_through_->Flush();
  if (demoter_ != nullptr) demoter_->Flush();
}

void TieredStore::HoldDemotionsForTesting(bool held) {
  if (demoter_ != nullptr) demoter_->SetHeld(held);
}

TieredStoreStats TieredStore::Stats() const {
  TieredStoreStats stats;
  stats.host = host_->Stats();
  if (below_ != nullptr) stats.lower.push_back(below_->Stats());
  MovementStats& movement = stats.movement;
  if (demoter_ != nullptr) {
    movement.demoted = demoter_->demoted();
    movement.demotion_failures = demoter_->failed();
  }
  if (promoter_ != nullptr) {
    const PromoterStats promoter = promoter_->Stats();
    movement.prefetch_queued = promoter.queued;
    movement.prefetch_promoted = promoter.promoted;
    movement.prefetch_skipped = promoter.skipped;
    movement.prefetch_failed = promoter.failed;
  }
  movement.async_loads = async_loads_.load(std::memory_order_relaxed);
  movement.load_promoted = load_promoted_.load(std::memory_order_relaxed);
  if (write_through_ != nullptr) {
    const WriteThroughStats w = write_through_->Stats();
    movement.write_through = true;
    movement.write_through_written = w.written;
    movement.write_through_skipped = w.skipped;
    movement.write_through_dropped = w.dropped;
    movement.write_through_failed = w.failed;
    movement.write_through_cancelled = w.cancelled;
  }
  return stats;
}

}  // namespace strata::storage
