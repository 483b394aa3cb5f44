#include "storage/tiered/tiered_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "storage/codec/codec_choice.h"
#include "storage/disk/disk_tier.h"
#include "storage/tiered/chunk_transfer.h"
#include "storage/tiered/demoter.h"
#include "storage/tiered/disk_lower_tier.h"
#include "storage/tiered/host_compressor.h"
#include "storage/tiered/host_forms.h"
#include "storage/tiered/importance_book.h"
#include "storage/tiered/prefix_locator.h"
#include "storage/tiered/promoter.h"
#include "storage/tiered/task_thread.h"
#include "storage/tiered/write_through.h"

namespace strata::storage {
namespace {

// Chunks per page as TenantKeys walks a tier's listing.
constexpr uint32_t kTenantPageSize = 10000;

absl::Status NoLongerCached(const ChunkKey& key) {
  return absl::AbortedError(
      fmt::format("chunk {} is no longer cached; redo the lookup", key.ToString()));
}

// Registers the host arena with a lower tier, so promotions and demotions skip pinning its pages
// per request (the disk tier: every io engine of its pool pins the arena once, when it is made or
// at this call, 30-100 ms per GiB of 4 KiB pages on the dev VM; far less with huge pages). A
// refusal is logged; the tier works unregistered.
void RegisterArena(HostTier& host, LowerTier& below) {
  const std::span<std::byte> arena[] = {{host.arena_base(), host.arena_size_bytes()}};
  const std::string_view name = TierName(below.tier());
  if (absl::Status status = below.RegisterMemory(arena); !status.ok()) {
    spdlog::warn("{} tier: host arena not registered, transfers pin its pages per request: {}",
                 name, status);
    return;
  }
  spdlog::info("{} tier: host arena ({} MiB) registered", name, host.arena_size_bytes() >> 20);
}

// OK when `lower` is top down below the host tier, one tier each, none null.
absl::Status CheckOrder(std::span<const std::unique_ptr<LowerTier>> lower) {
  Tier above = Tier::kHost;
  for (const std::unique_ptr<LowerTier>& tier : lower) {
    if (tier == nullptr) return absl::InvalidArgumentError("tiered store: a null lower tier");
    if (tier->tier() <= above) {
      return absl::InvalidArgumentError(
          fmt::format("tiered store: the {} tier cannot go below the {} tier",
                      TierName(tier->tier()), TierName(above)));
    }
    above = tier->tier();
  }
  return absl::OkStatus();
}

// The codec of `name` (FindTierCodec's; "" : none) with `params`.
absl::StatusOr<CodecChoice> FindCodec(const std::string& name, const CodecParams& params) {
  CodecChoice choice{.params = params};
  if (name.empty()) return choice;
  STRATA_ASSIGN_OR_RETURN(choice.codec, FindTierCodec(name));
  return choice;
}

// The codecs `name` and `tenants` name ([disk] or [host] codec and tenant_codecs); `where` names
// the tier in errors.
absl::StatusOr<TenantCodecs> FindCodecs(
    const std::string& name, const CodecParams& params,
    const std::map<std::string, TieredDiskOptions::TenantCodec>& tenants, std::string_view where) {
  TenantCodecs codecs;
  absl::StatusOr<CodecChoice> fallback = FindCodec(name, params);
  if (!fallback.ok()) return Annotate(fallback.status(), where);
  codecs.fallback = *fallback;
  for (const auto& [tenant, choice] : tenants) {
    absl::StatusOr<CodecChoice> own = FindCodec(choice.codec, choice.params);
    if (!own.ok()) return Annotate(own.status(), fmt::format("{}, tenant '{}'", where, tenant));
    codecs.tenants.emplace(tenant, *own);
  }
  return codecs;
}

// The larger of two errors, or NaN when either is (an error measured on KV that holds a NaN): a
// total never hides that one chunk's error is unknown.
double LargerError(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b);
}

// Counts one chunk's recode into `totals`.
void AddRecode(const LowerTier::RecodeResult& result, RecodeTotals& totals) {
  switch (result.outcome) {
    case LowerTier::RecodeOutcome::kRecoded:
      ++totals.recoded;
      totals.stored_bytes_before += result.stored_bytes_before;
      totals.stored_bytes_after += result.stored_bytes_after;
      totals.max_error.relative_frobenius =
          LargerError(totals.max_error.relative_frobenius, result.error.relative_frobenius);
      totals.max_error.max_abs = LargerError(totals.max_error.max_abs, result.error.max_abs);
      break;
    case LowerTier::RecodeOutcome::kAlreadyInForm:
      ++totals.already_in_form;
      break;
    case LowerTier::RecodeOutcome::kMissing:
      ++totals.missing;
      break;
    case LowerTier::RecodeOutcome::kNotSmaller:
      ++totals.not_smaller;
      break;
    case LowerTier::RecodeOutcome::kNoLayout:
      ++totals.no_layout;
      break;
    case LowerTier::RecodeOutcome::kBusy:
      ++totals.busy;
      break;
    case LowerTier::RecodeOutcome::kNoImportance:
      ++totals.no_importance;
      break;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Create(TieredStoreOptions options) {
  if (options.host.listener != nullptr) {
    return absl::InvalidArgumentError(
        "tiered store: the host tier's eviction listener is the store's demoter; pass none");
  }
  std::unique_ptr<TieredStore> store(new TieredStore());
  store->layouts_ = std::make_unique<KnownLayouts>();
  store->importance_ = std::make_unique<ImportanceBook>();
  if (options.disk.has_value()) {
    const TieredDiskOptions& disk = *options.disk;
    DiskEncodingOptions encoding{.decode_threads = disk.codec_threads};
    STRATA_ASSIGN_OR_RETURN(encoding.codecs, FindCodecs(disk.codec, disk.codec_params,
                                                        disk.tenant_codecs, "disk tier"));
    absl::StatusOr<std::unique_ptr<DiskTier>> tier =
        DiskTier::Open({.directory = disk.directory,
                        .capacity_bytes = disk.capacity_bytes,
                        .segment_bytes = disk.segment_bytes,
                        .observer = disk.observer});
    if (!tier.ok()) return Annotate(tier.status(), "disk tier");
    store->disk_tier_ = *std::move(tier);
    store->owned_lower_.push_back(
        std::make_unique<DiskLowerTier>(store->disk_tier_.get(), encoding));
  }
  for (std::unique_ptr<LowerTier>& tier : options.lower) {
    store->owned_lower_.push_back(std::move(tier));
  }
  if (absl::Status status = CheckOrder(store->owned_lower_); !status.ok()) return status;
  for (const std::unique_ptr<LowerTier>& tier : store->owned_lower_) {
    store->lower_.push_back(tier.get());
  }

  const MovementOptions& movement = options.movement;
  std::vector<ChunkObserver*> observers;
  if (options.host.observer != nullptr) observers.push_back(options.host.observer);
  if (!store->lower_.empty()) {
    LowerTier* nearest = store->lower_.front();
    absl::StatusOr<std::unique_ptr<Demoter>> demoter = Demoter::Create(
        nearest,
        {.max_queued_bytes = movement.demotion_queue_bytes, .layouts = store->layouts_.get()});
    if (!demoter.ok()) return Annotate(demoter.status(), "demoter");
    store->demoter_ = *std::move(demoter);
    options.host.listener = store->demoter_.get();
    if (movement.write_through) {
      absl::StatusOr<std::unique_ptr<WriteThrough>> write_through =
          WriteThrough::Create(nearest, {.layouts = store->layouts_.get()});
      if (!write_through.ok()) return Annotate(write_through.status(), "write-through");
      store->write_through_ = *std::move(write_through);
      observers.push_back(store->write_through_.get());
    }
  }
  STRATA_ASSIGN_OR_RETURN(const TenantCodecs host_codecs,
                          FindCodecs(options.host_codec.codec, options.host_codec.params,
                                     options.host_codec.tenant_codecs, "host codec"));
  if (host_codecs.any()) {
    absl::StatusOr<std::unique_ptr<HostCompressor>> compressor =
        HostCompressor::Create({.codecs = host_codecs});
    if (!compressor.ok()) return Annotate(compressor.status(), "host codec");
    store->compressor_ = *std::move(compressor);
    observers.push_back(store->compressor_.get());
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
  store->host_forms_ =
      std::make_unique<HostForms>(*store->host_, *store->layouts_, *store->importance_);
  if (store->write_through_ != nullptr) store->write_through_->Start(store->host_.get());
  if (store->compressor_ != nullptr) {
    store->compressor_->Start(store->host_forms_.get(), store->host_.get());
  }
  if (!store->lower_.empty()) {
    if (movement.register_arena) {
      for (LowerTier* below : store->lower_) RegisterArena(*store->host_, *below);
    }
    absl::StatusOr<std::unique_ptr<Promoter>> promoter = Promoter::Create(
        store->lower_, store->host_.get(),
        {.max_queued_chunks = movement.prefetch_queue_chunks, .staged = store->demoter_.get()});
    if (!promoter.ok()) return Annotate(promoter.status(), "promoter");
    store->promoter_ = *std::move(promoter);
  }
  // Loads past a host miss wait for reads anyway; a host hit is microseconds: the session thread
  // wins the CPU (shortest job first), nicer threads take the rest.
  store->loads_ = std::make_unique<TaskThread>("strata-loads", kBackgroundNice);
  store->recoders_ = std::make_unique<TaskPool>(
      "strata-recode", std::max(options.host_codec.recode_threads,
                                options.disk.has_value() ? options.disk->codec_threads : 0u));
  store->maintenance_ = std::make_unique<TaskThread>("strata-tiered");
  return store;
}

TieredStore::~TieredStore() { Stop(); }

void TieredStore::Stop() {
  if (stopped_.exchange(true)) return;
  // Queued compressions are dropped; the one in progress finishes.
  if (compressor_ != nullptr) compressor_->Stop();
  // Loads and operators' tasks already accepted run to the end (their callbacks with them),
  // while the promoter, whose prefetch a load may wait for, still runs.
  // (Null when Create failed before making them: the destructor stops what was made.)
  if (loads_ != nullptr) loads_->Stop();
  if (maintenance_ != nullptr) maintenance_->Stop();
  // Queued prefetches are dropped; a promotion in progress finishes (its evictions reach the
  // demoter, still running).
  if (promoter_ != nullptr) promoter_->Stop();
  // Queued write-throughs are dropped (the chunks stay in the host tier, whose contents go with
  // the process); the batch in flight finishes.
  if (write_through_ != nullptr) write_through_->Stop();
  // Demotions queued so far reach the disk before the process goes; later ones run inline.
  if (demoter_ != nullptr) demoter_->Stop();
  // The arena is unmapped before the lower tiers go (members' order): unregister it, so no
  // later request into memory mapped at its addresses would use its pinned pages.
  for (LowerTier* below : lower_) {
    if (absl::Status status = below->RegisterMemory({}); !status.ok()) {
      spdlog::warn("{} tier: unregistering the host arena: {}", TierName(below->tier()), status);
    }
  }
}

std::vector<Tier> TieredStore::tiers() const {
  std::vector<Tier> tiers = {Tier::kHost};
  for (const LowerTier* below : lower_) tiers.push_back(below->tier());
  return tiers;
}

bool TieredStore::has(Tier tier) const { return tier == Tier::kHost || FindTier(tier) != nullptr; }

bool TieredStore::has_lower_tiers() const { return !lower_.empty(); }

LowerTier* TieredStore::FindTier(Tier tier) const {
  for (LowerTier* below : lower_) {
    if (below->tier() == tier) return below;
  }
  return nullptr;
}

LowerTier* TieredStore::FindBelow(const ChunkKey& key) const {
  return storage::FindBelow(lower_, demoter_.get(), key);
}

std::vector<Tier> TieredStore::LocatePrefix(std::span<const ChunkKey> chain) const {
  return storage::LocatePrefix(*host_, lower_, chain, demoter_.get());
}

std::optional<std::vector<Tier>> TieredStore::LocatePrefixOrAsk(std::span<const ChunkKey> chain,
                                                                LocateDone done,
                                                                std::chrono::microseconds budget) {
  std::vector<Tier> located = LocatePrefix(chain);
  std::vector<LowerTier*> asking;
  for (LowerTier* below : lower_) {
    if (below->discovers()) asking.push_back(below);
  }
  if (located.size() == chain.size() || asking.empty()) return located;
  // Every asking tier answers once. The count starts one higher, for this call: when every
  // tier answered before the loop ends (none had anyone to ask), the answer is returned here and
  // `done` is never called; otherwise the last answer locates the chain again and calls `done`.
  struct Round {
    Round(size_t count, LocateDone on_done) : waiting(count), done(std::move(on_done)) {}
    std::atomic<size_t> waiting;
    LocateDone done;
  };
  auto round = std::make_shared<Round>(asking.size() + 1, std::move(done));
  auto keys = std::make_shared<const std::vector<ChunkKey>>(chain.begin(), chain.end());
  for (LowerTier* below : asking) {
    below->Discover(*keys, budget, [this, round, keys] {
      if (round->waiting.fetch_sub(1) == 1) std::move(round->done)(LocatePrefix(*keys));
    });
  }
  if (round->waiting.fetch_sub(1) == 1) return LocatePrefix(*keys);
  return std::nullopt;
}

std::vector<Tier> TieredStore::TiersOf(const ChunkKey& key) const {
  std::vector<Tier> tiers;
  if (host_->Contains(key)) tiers.push_back(Tier::kHost);
  for (const LowerTier* below : lower_) {
    if (HeldBy(lower_, demoter_.get(), *below, key)) tiers.push_back(below->tier());
  }
  return tiers;
}

std::optional<LoadLeases> TieredStore::AcquireForLoad(std::shared_ptr<const KvLayout> layout,
                                                      std::vector<ChunkKey> keys,
                                                      const LoadOptions& options, LoadDone done) {
  LoadLeases leased;
  leased.leases.reserve(keys.size());
  for (const ChunkKey& key : keys) {
    absl::StatusOr<std::optional<ChunkLease>> acquired = AcquireHostForLoad(key, options);
    if (!acquired.ok()) {
      leased.failure = acquired.status();
      return leased;
    }
    if (!acquired->has_value()) {
      // Held encoded (decoded on the loads thread) or below: the rest goes on the loads thread.
      if (host_->Contains(key) || FindBelow(key) != nullptr) break;
      leased.failure = NoLongerCached(key);
      return leased;
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

absl::StatusOr<std::optional<ChunkLease>> TieredStore::AcquireHostForLoad(
    const ChunkKey& key, const LoadOptions& options) {
  const Forms forms = options.reader_decodes.empty()
                          ? Forms::kPlainOnly
                          : Forms::DecodedByReader(options.reader_decodes);
  absl::StatusOr<std::optional<ChunkLease>> acquired =
      host_->Acquire(key, options.lease, options.owner, options.reader_verifies, forms);
  if (acquired.ok() && acquired->has_value() && (*acquired)->encoding().encoded()) {
    encoded_loads_.fetch_add(1, std::memory_order_relaxed);
  }
  return acquired;
}

void TieredStore::ContinueLoad(const KvLayout& layout, std::span<const ChunkKey> keys,
                               const LoadOptions& options, LoadLeases& leased) {
  // The chunks one batched promotion covered: keys [run_first, run_first + run.size()), from
  // `run_source`.
  size_t run_first = 0;
  std::vector<absl::StatusOr<PromoteOutcome>> run;
  Tier run_source = Tier::kHost;
  auto acquire = [&](const ChunkKey& key) { return AcquireHostForLoad(key, options); };
  for (size_t i = leased.leases.size(); i < keys.size(); ++i) {
    const ChunkKey& key = keys[i];
    absl::StatusOr<std::optional<ChunkLease>> acquired = acquire(key);
    // Held encoded (Compress): decoded back in place, then leased as any plain chunk (decoded
    // again when a Compress encoded it once more in between, a few times at most).
    for (int decodes = 0; acquired.ok() && !acquired->has_value() && host_->Contains(key);
         ++decodes) {
      if (decodes == HostForms::kBusyTries) {
        acquired = absl::UnavailableError(fmt::format(
            "chunk {} was compressed again after each of {} decodes for this load; retry",
            key.ToString(), decodes));
        break;
      }
      if (absl::Status decoded = host_forms_->DecodeInPlace(key); !decoded.ok()) {
        leased.failure = decoded;
        return;
      }
      decoded_loads_.fetch_add(1, std::memory_order_relaxed);
      acquired = acquire(key);
    }
    if (acquired.ok() && !acquired->has_value() && !lower_.empty()) {
      if (i >= run_first + run.size()) {
        // keys[i] is missing; the run goes on while the host tier lacks the chunks after it and
        // the same tier holds them.
        LowerTier* source = FindBelow(key);
        run_first = i;
        run.clear();
        if (source != nullptr) {
          const size_t end = PromotionRunEnd(keys, i, source);
          run = PromoteRun(*source, *host_, layout, keys.subspan(i, end - i), demoter_.get());
          run_source = source->tier();
        }
      }
      if (run.empty()) {
        acquired = acquire(key);  // in no lower tier now: committed meanwhile, or gone
      } else if (const absl::StatusOr<PromoteOutcome>& promoted = run[i - run_first];
                 !promoted.ok()) {
        leased.failure = promoted.status();
        return;
      } else if (*promoted != PromoteOutcome::kNotBelow) {
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
      load_promoted_[static_cast<size_t>(run_source)].fetch_add(1, std::memory_order_relaxed);
    }
  }
}

size_t TieredStore::PromotionRunEnd(std::span<const ChunkKey> keys, size_t first,
                                    const LowerTier* source) const {
  size_t end = first + 1;
  while (end < keys.size() && end - first < kPromotionRunChunks && !host_->Contains(keys[end]) &&
         FindBelow(keys[end]) == source) {
    ++end;
  }
  return end;
}

absl::StatusOr<uint32_t> TieredStore::Prefetch(const KvLayout& layout,
                                               std::span<const ChunkKey> chain) {
  if (promoter_ == nullptr) return 0;
  return promoter_->Enqueue(layout, chain);
}

std::optional<LowerTier::ChunkInfo> TieredStore::DescribeBelowHost(const ChunkKey& key) const {
  if (demoter_ != nullptr) {
    if (std::shared_ptr<const StagedPayload> staged = demoter_->FindStaged(key)) {
      return LowerTier::ChunkInfo{.payload_bytes = staged->payload_bytes,
                                  .payload_checksum = staged->checksum,
                                  .num_tokens = staged->num_tokens};
    }
  }
  for (LowerTier* below : lower_) {
    if (below->tier() == Tier::kRemote) continue;
    if (std::optional<LowerTier::ChunkInfo> info = below->Lookup(key)) return info;
  }
  return std::nullopt;
}

bool TieredStore::PromoteForPeer(std::vector<ChunkKey> keys, absl::AnyInvocable<void() &&> done) {
  return loads_->Submit(
      [this, keys = std::move(keys), done = std::move(done)]() mutable {
        // Runs of consecutive keys held by the same tier, read with one queue each.
        size_t i = 0;
        while (i < keys.size()) {
          // Held compressed: decoded back in place, so the peer reads the chunk (one that does
          // not decode is removed, and its lease is answered as one that left).
          if (host_->HoldsEncoded(keys[i]) && host_forms_->DecodeInPlace(keys[i]).ok()) {
            decoded_loads_.fetch_add(1, std::memory_order_relaxed);
          }
          LowerTier* source = host_->Contains(keys[i]) ? nullptr : FindBelow(keys[i]);
          if (source == nullptr || source->tier() == Tier::kRemote) {
            ++i;
            continue;
          }
          const size_t end = PromotionRunEnd(keys, i, source);
          const std::span<const ChunkKey> run(keys.data() + i, end - i);
          for (const absl::StatusOr<PromoteOutcome>& outcome :
               PromoteRunAsRecorded(*source, *host_, run, demoter_.get())) {
            if (outcome.ok() && *outcome == PromoteOutcome::kPromoted) {
              peer_promoted_.fetch_add(1, std::memory_order_relaxed);
            }
          }
          i = end;
        }
        std::move(done)();
      },
      /*urgent=*/true);
}

absl::StatusOr<MoveResult> TieredStore::Move(std::span<const ChunkKey> keys, Tier target,
                                             const KvLayout* layout) {
  if (!has(target)) {
    return absl::FailedPreconditionError(fmt::format("{} tier not configured", TierName(target)));
  }
  LowerTier* const into = FindTier(target);  // null: the host tier
  MoveResult result;
  for (const ChunkKey& key : keys) {
    absl::StatusOr<MoveOutcome> outcome = MoveOne(key, into, layout);
    if (!outcome.ok()) return outcome.status();
    switch (*outcome) {
      case MoveOutcome::kMoved:
        ++result.moved_chunks;
        break;
      case MoveOutcome::kAlreadyThere:
        ++result.already_in_target;
        break;
      case MoveOutcome::kMissing:
        ++result.missing_chunks;
        break;
    }
  }
  return result;
}

absl::StatusOr<TieredStore::MoveOutcome> TieredStore::MoveOne(const ChunkKey& key, LowerTier* into,
                                                              const KvLayout* layout) {
  const bool in_host = host_->Contains(key);
  // The nearest lower tier holding it; a chunk evicted and waiting for the demoter's write is on
  // its way to the nearest tier, in neither tier's index.
  LowerTier* const below = FindBelow(key);
  const bool staged = demoter_ != nullptr && demoter_->IsStaged(key);
  if (!in_host && below == nullptr) return MoveOutcome::kMissing;
  if (into == nullptr ? in_host && below == nullptr : !in_host && into->Contains(key)) {
    return MoveOutcome::kAlreadyThere;
  }
  if (into != nullptr && !in_host && staged && into == lower_.front()) {
    // Only staged for `into`: its write is forced, so the chunk is there once Move returns
    // (missing when the write failed, counted by the demoter).
    demoter_->Flush();
    return into->Contains(key) ? MoveOutcome::kMoved : MoveOutcome::kMissing;
  }
  if (!in_host) {
    // Into the host tier first: the move up itself, or the way from one lower tier to another.
    if (layout == nullptr) {
      return absl::InvalidArgumentError(fmt::format(
          "moving chunks out of the {} tier needs the selector's layout", TierName(below->tier())));
    }
    absl::StatusOr<PromoteOutcome> promoted =
        PromoteChunk(*below, *host_, *layout, key, demoter_.get());
    if (!promoted.ok()) return promoted.status();
    // Gone meanwhile, or another writer is storing it: the lower copy stays.
    if (*promoted == PromoteOutcome::kNotBelow || *promoted == PromoteOutcome::kInProgress) {
      return MoveOutcome::kMissing;
    }
  }
  if (into == nullptr) {  // up: out of every tier below
    // A staged copy would land below after the removal: let it land first.
    if (staged) demoter_->Flush();
    for (LowerTier* tier : lower_) {
      if (absl::StatusOr<bool> removed = tier->Remove(key); !removed.ok()) return removed.status();
    }
    return MoveOutcome::kMoved;
  }
  // Down: written below first, then dropped from the host tier (never in no tier); other lower
  // tiers keep their copies.
  if (!into->Contains(key)) {
    absl::StatusOr<bool> copied = CopyDown(*host_, *into, key, *layouts_);
    if (!copied.ok()) return copied.status();
    if (!*copied) return MoveOutcome::kMissing;  // evicted or removed meanwhile
  }
  if (absl::StatusOr<RemoveResult> removed = host_->Remove(key); !removed.ok()) {
    return removed.status();
  }
  return MoveOutcome::kMoved;
}

absl::Status TieredStore::NoteLayout(const KvLayout& layout) {
  STRATA_RETURN_IF_ERROR(layouts_->Note(layout));
  for (LowerTier* below : lower_) below->NoteLayout(layout);
  return absl::OkStatus();
}

absl::StatusOr<RecodeTotals> TieredStore::Recode(std::span<const ChunkKey> keys, Tier tier,
                                                 const LowerTier::Recoding& recoding) {
  LowerTier* const below = FindTier(tier);
  if (tier != Tier::kHost && below == nullptr) {
    return absl::FailedPreconditionError(fmt::format("{} tier not configured", TierName(tier)));
  }
  if (demoter_ != nullptr && below == lower_.front()) demoter_->Flush();
  auto recode = [&](const ChunkKey& key) {
    return below == nullptr ? host_forms_->Recode(key, recoding) : below->Recode(key, recoding);
  };
  absl::Mutex mu;
  RecodeTotals totals;
  size_t failed_at = keys.size();  // the first key whose recode failed, and its error
  absl::Status failure;
  std::atomic<bool> failed{false};
  {
    TaskPool::Batch batch(*recoders_);
    for (size_t i = 0; i < keys.size(); ++i) {
      batch.Run([&, i] {
        if (failed.load()) return;
        absl::StatusOr<LowerTier::RecodeResult> result = recode(keys[i]);
        absl::MutexLock lock(&mu);
        if (result.ok()) {
          AddRecode(*result, totals);
        } else if (i < failed_at) {
          failed = true;
          failed_at = i;
          failure = result.status();
        }
      });
    }
  }
  if (!failure.ok()) return failure;
  return totals;
}

absl::StatusOr<LowerTier::ListPage> TieredStore::ListBelowHost(
    Tier tier, const LowerTier::ListOptions& options) const {
  if (tier == Tier::kHost) {
    return absl::InvalidArgumentError("the host tier lists through HostTier::ListChunks");
  }
  const LowerTier* below = FindTier(tier);
  if (below == nullptr) {
    return absl::FailedPreconditionError(fmt::format("{} tier not configured", TierName(tier)));
  }
  if (options.tenant.has_value() && !below->records_tenants()) {
    return absl::FailedPreconditionError(
        fmt::format("the {} tier does not record tenants", TierName(tier)));
  }
  return below->List(options);
}

absl::StatusOr<std::vector<ChunkKey>> TieredStore::TenantKeys(const std::string& tenant,
                                                              std::optional<Tier> tier) {
  if (tier.has_value() && !has(*tier)) {
    return absl::FailedPreconditionError(fmt::format("{} tier not configured", TierName(*tier)));
  }
  std::vector<ChunkKey> keys;
  absl::flat_hash_set<ChunkKey> seen;
  if (!tier.has_value() || *tier == Tier::kHost) {
    ListChunksOptions page_options{.limit = kTenantPageSize, .tenant = tenant};
    do {
      const ChunkPage page = host_->ListChunks(page_options);
      for (const ChunkInfo& info : page.chunks) {
        if (seen.insert(info.key).second) keys.push_back(info.key);
      }
      page_options.cursor = page.next_cursor;
    } while (page_options.cursor != 0);
  }
  if (tier == Tier::kHost) return keys;
  if (demoter_ != nullptr) demoter_->Flush();
  for (const LowerTier* below : lower_) {
    if (tier.has_value() ? *tier != below->tier() : !below->records_tenants()) continue;
    LowerTier::ListOptions page_options{.limit = kTenantPageSize, .tenant = tenant};
    do {
      absl::StatusOr<LowerTier::ListPage> page = ListBelowHost(below->tier(), page_options);
      if (!page.ok()) return page.status();
      for (const LowerTier::ListedChunk& chunk : page->chunks) {
        if (seen.insert(chunk.key).second) keys.push_back(chunk.key);
      }
      page_options.after = page->resume_after;
    } while (page_options.after.has_value());
  }
  return keys;
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
  // Demotions queued before the call are dropped, and the one being written lands first, so
  // nothing cleared reaches a lower tier afterwards.
  if (demoter_ != nullptr && tier != Tier::kHost) demoter_->Discard(doomed);
  for (LowerTier* below : lower_) {
    if (tier.has_value() && *tier != below->tier()) continue;
    absl::StatusOr<RemoveResult> from_below = below->RemoveIf(doomed);
    if (!from_below.ok()) return from_below.status();
    removed.chunks += from_below->chunks;
    removed.bytes += from_below->bytes;
  }
  return removed;
}

absl::StatusOr<uint64_t> TieredStore::FlushToLowerTiers() {
  if (lower_.empty()) return 0;
  LowerTier& nearest = *lower_.front();
  demoter_->Flush();
  uint64_t flushed = 0;
  ListChunksOptions page_options{.limit = 10000};
  while (true) {
    const ChunkPage page = host_->ListChunks(page_options);
    for (const ChunkInfo& info : page.chunks) {
      if (nearest.Contains(info.key)) continue;
      absl::StatusOr<bool> copied = CopyDown(*host_, nearest, info.key, *layouts_);
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
  if (compressor_ != nullptr) compressor_->Flush();
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
  for (const LowerTier* below : lower_) stats.lower.push_back(below->Stats());
  MovementStats& movement = stats.movement;
  if (compressor_ != nullptr) {
    const HostCompressorStats compressor = compressor_->Stats();
    movement.host_compressed = compressor.compressed;
    movement.host_compress_busy = compressor.busy;
    movement.host_compress_skipped = compressor.skipped;
    movement.host_compress_failed = compressor.failed;
    movement.host_compress_dropped = compressor.dropped;
  }
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
  movement.load_decoded = decoded_loads_.load(std::memory_order_relaxed);
  movement.load_encoded = encoded_loads_.load(std::memory_order_relaxed);
  for (size_t t = 0; t < kTierCount; ++t) {
    movement.load_promoted_from[t] = load_promoted_[t].load(std::memory_order_relaxed);
    movement.load_promoted += movement.load_promoted_from[t];
  }
  movement.peer_promoted = peer_promoted_.load(std::memory_order_relaxed);
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
