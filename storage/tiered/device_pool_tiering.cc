#include "storage/tiered/device_pool_tiering.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/token_drop_codec.h"
#include "storage/host/payload_view.h"
#include "storage/tiered/chunk_codec.h"

namespace strata::storage {
namespace {

// The pool's reservations for promotions, and its references for demotions ahead, are these
// owners' (sessions' owners are their ids, > 0 and far below them).
constexpr uint64_t kPromotionOwner = ~uint64_t{0};
constexpr uint64_t kDemotionOwner = ~uint64_t{0} - 1;

// The copy runs between a pool chunk (runs of PoolChunkRuns, from `pool_base`) and its payload in
// `ranges` of the arena at `arena_base`, each run split where a range of the payload ends.
// `to_pool`: payload -> pool; otherwise pool -> payload.
std::vector<CopyRun> ArenaCopyRuns(std::span<const PoolChunkRun> chunk_runs, std::byte* pool_base,
                                   std::byte* arena_base, std::span<const ArenaRange> ranges,
                                   bool to_pool) {
  std::vector<uint64_t> starts;  // the payload offset each range starts at
  starts.reserve(ranges.size());
  uint64_t at = 0;
  for (const ArenaRange& range : ranges) {
    starts.push_back(at);
    at += range.size_bytes;
  }
  std::vector<CopyRun> out;
  out.reserve(chunk_runs.size());
  for (const PoolChunkRun& run : chunk_runs) {
    uint64_t done = 0;
    while (done < run.bytes) {
      const uint64_t offset = run.chunk_offset + done;
      const size_t r = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), offset) -
                                           starts.begin() - 1);
      const uint64_t in_range = offset - starts[r];
      const uint64_t piece = std::min(run.bytes - done, ranges[r].size_bytes - in_range);
      std::byte* arena = arena_base + ranges[r].offset + in_range;
      std::byte* pool = pool_base + run.pool_offset + done;
      out.push_back(to_pool ? CopyRun{.src = arena, .dst = pool, .size_bytes = piece}
                            : CopyRun{.src = pool, .dst = arena, .size_bytes = piece});
      done += piece;
    }
  }
  return out;
}

}  // namespace

absl::Status DevicePoolTiering::CopyAndWait(std::span<const CopyRun> runs, CopyDigests* digest) {
  absl::MutexLock lock(&mu_);
  if (stream_ == nullptr) {
    STRATA_ASSIGN_OR_RETURN(stream_, runtime_.CreateStream("strata-t0-tiering"));
  }
  if (digest != nullptr) {
    const std::vector<uint32_t> digest_of(runs.size(), 0);
    STRATA_RETURN_IF_ERROR(stream_->CopyDigested(runs, digest_of, *digest));
  } else {
    STRATA_RETURN_IF_ERROR(stream_->Copy(runs));
  }
  return stream_->Synchronize();
}

DevicePoolTiering::DevicePoolTiering(HostTier& host, DeviceRuntime& runtime,
                                     DevicePoolTieringOptions options)
    : host_(host), runtime_(runtime), options_(options) {
  if (options_.demote_ahead) {
    demoter_ = std::make_unique<BackgroundWorker<QueuedDemotion>>(
        BackgroundWorkerOptions{.thread_name = "strata-t0-demote",
                                .max_batch = 16,
                                .max_queued = options_.demote_ahead_queue,
                                .on_stop = BackgroundWorkerOptions::OnStop::kDropQueued,
                                .nice = kBackgroundNice},
        [this](std::span<QueuedDemotion> queued) { DemoteQueued(queued); });
  }
}

DevicePoolTiering::~DevicePoolTiering() { Stop(); }

void DevicePoolTiering::Stop() {
  if (demoter_ != nullptr) demoter_->Stop();
}

void DevicePoolTiering::FlushDemotionsAhead() {
  if (demoter_ != nullptr) demoter_->Flush();
}

DevicePoolTiering::CopyDownOutcome DevicePoolTiering::CopyDown(const KvLayout& layout,
                                                               const DevicePool& pool,
                                                               const ChunkKey& key,
                                                               std::span<const uint32_t> pages) {
  const auto tokens = static_cast<uint32_t>(pages.size() * options_.block_tokens);
  const uint64_t bytes = layout.chunk_bytes(tokens);
  absl::StatusOr<ReserveResult> reserved = host_.ReserveSized(key, bytes, {.num_tokens = tokens});
  if (!reserved.ok()) return CopyDownOutcome::kFailed;
  if (reserved->outcome != ReserveOutcome::kReserved) return CopyDownOutcome::kPresent;
  WriteReservation reservation = std::move(reserved->reservation);
  const std::vector<PoolChunkRun> chunk_runs =
      PoolChunkRuns(layout, options_.block_tokens, pool.geometry(), pages);
  const std::vector<CopyRun> runs =
      ArenaCopyRuns(chunk_runs, pool.PageData(0, 0), host_.arena_base(), reservation.ranges(),
                    /*to_pool=*/false);
  absl::Status copied = CopyAndWait(runs, /*digest=*/nullptr);
  if (copied.ok()) copied = host_.Commit(std::move(reservation));
  if (!copied.ok()) {
    spdlog::warn("device pool: demoting {} to the host tier failed: {}", key.ToString(),
                 copied.ToString());
    return CopyDownOutcome::kFailed;
  }
  absl::MutexLock lock(&mu_);
  stats_.demoted_bytes += bytes;
  return CopyDownOutcome::kCopied;
}

void DevicePoolTiering::Demote(const KvLayout& layout, const DevicePool& pool, const ChunkKey& key,
                               std::span<const uint32_t> pages) {
  CountDemotion(CopyDown(layout, pool, key, pages), /*ahead=*/false);
}

void DevicePoolTiering::CountDemotion(CopyDownOutcome outcome, bool ahead) {
  absl::MutexLock lock(&mu_);
  switch (outcome) {
    case CopyDownOutcome::kCopied:
      ++stats_.demoted;
      if (ahead) ++stats_.demoted_ahead;
      break;
    case CopyDownOutcome::kPresent:
      ++stats_.demote_skipped;
      break;
    case CopyDownOutcome::kFailed:
      ++stats_.demote_failures;
      break;
  }
}

void DevicePoolTiering::DemoteAhead(const KvLayout& layout, DevicePool& pool, const ChunkKey& key,
                                    uint64_t owner) {
  if (demoter_ == nullptr || owner == kDemotionOwner || host_.Contains(key)) return;
  if (!demoter_->Push({.layout = layout, .pool = &pool, .key = key})) {
    absl::MutexLock lock(&mu_);
    ++stats_.demote_ahead_dropped;
  }
}

void DevicePoolTiering::DemoteQueued(std::span<QueuedDemotion> queued) {
  for (QueuedDemotion& chunk : queued) {
    if (host_.Contains(chunk.key)) continue;
    // The reference keeps the chunk's pages from eviction while they are copied (its release
    // makes the chunk the most recently used again, as it nearly was); nullopt when it was
    // evicted (and so demoted) or removed meanwhile.
    std::optional<PoolChunkRef> ref =
        chunk.pool->Acquire(chunk.key, kDemotionOwner, PoolUse::kUpkeep);
    if (!ref.has_value()) continue;
    if (!ref->positions.empty()) {  // replaced meanwhile by kept blocks, which stay up here
      (void)chunk.pool->Release(ref->ref_id);
      continue;
    }
    const CopyDownOutcome outcome = CopyDown(chunk.layout, *chunk.pool, chunk.key, ref->pages);
    (void)chunk.pool->Release(ref->ref_id);
    CountDemotion(outcome, /*ahead=*/true);
  }
}

absl::StatusOr<bool> DevicePoolTiering::Promote(const KvLayout& layout, DevicePool& pool,
                                                const ChunkKey& key) {
  STRATA_ASSIGN_OR_RETURN(std::optional<ChunkLease> lease,
                          host_.AcquireForCopy(key, std::nullopt, Forms::kAny));
  if (lease.has_value() && lease->encoding().encoded()) {
    return PromoteKept(layout, pool, key, *std::move(lease));
  }
  const uint64_t page_bytes = layout.chunk_bytes(options_.block_tokens);
  if (!lease.has_value() || lease->size_bytes() == 0 || lease->size_bytes() % page_bytes != 0) {
    return false;
  }
  const uint64_t num_pages = lease->size_bytes() / page_bytes;
  if (num_pages > pool.geometry().num_pages) return false;
  // The bytes must be the ones committed: a chunk that rotted in the arena is not promoted. A
  // runtime that digests its copies checks them in the copy's pass over the payload (the runs
  // are in payload order); another checks them in a pass of their own first.
  const bool digested = runtime_.Capabilities().digested_copies;
  if (!digested && lease->payload().Checksum() != lease->checksum()) {
    absl::MutexLock lock(&mu_);
    ++stats_.promote_failures;
    return false;
  }
  STRATA_ASSIGN_OR_RETURN(PoolReservation reservation,
                          pool.Reserve(key, static_cast<uint32_t>(num_pages), kPromotionOwner));
  if (reservation.outcome != PoolReserveOutcome::kReserved) {
    return reservation.outcome == PoolReserveOutcome::kAlreadyPresent;
  }
  const std::vector<PoolChunkRun> chunk_runs =
      PoolChunkRuns(layout, options_.block_tokens, pool.geometry(), reservation.pages);
  const std::vector<CopyRun> runs =
      ArenaCopyRuns(chunk_runs, pool.PageData(0, 0), host_.arena_base(), lease->ranges(),
                    /*to_pool=*/true);
  CopyDigests digest(1);
  absl::Status copied = CopyAndWait(runs, digested ? &digest : nullptr);
  if (copied.ok() && digested && digest.Digest(0) != lease->checksum()) {
    copied = absl::DataLossError("the host tier's copy does not match its checksum");
  }
  if (copied.ok()) copied = pool.Commit(reservation.id);
  if (!copied.ok()) pool.Abort(reservation.id);
  absl::MutexLock lock(&mu_);
  if (!copied.ok()) {
    ++stats_.promote_failures;
    spdlog::warn("device pool: promoting {} from the host tier failed: {}", key.ToString(),
                 copied.ToString());
    return false;
  }
  ++stats_.promoted;
  stats_.promoted_bytes += lease->size_bytes();
  return true;
}

absl::StatusOr<bool> DevicePoolTiering::PromoteKept(const KvLayout& layout, DevicePool& pool,
                                                    const ChunkKey& key, ChunkLease lease) {
  absl::StatusOr<const Codec*> codec =
      CodecRegistry::Find(static_cast<CodecId>(lease.encoding().codec));
  const auto* dropping = codec.ok() ? dynamic_cast<const TokenDropCodec*>(*codec) : nullptr;
  if (dropping == nullptr) return false;  // a form loads decode in place first
  auto fail = [&](const absl::Status& why) {
    absl::MutexLock lock(&mu_);
    ++stats_.promote_failures;
    spdlog::warn("device pool: promoting the kept blocks of {} failed: {}", key.ToString(),
                 why.ToString());
    return false;
  };
  std::vector<std::byte> frame(lease.size_bytes());
  lease.payload().CopyTo(frame);
  const uint64_t checksum = lease.checksum();
  const KvLayout coded = CodingLayout(layout, lease.num_tokens());
  lease.Release();
  if (ChecksumBytes(frame) != checksum) {
    return fail(absl::DataLossError("the host tier's frame does not match its checksum"));
  }
  absl::StatusOr<KeptTokens> kept = dropping->DecodeKept(coded, frame);
  if (!kept.ok()) return fail(kept.status());
  // Each kept block is a whole number of pages, each read at its own position.
  const uint32_t block_tokens = options_.block_tokens;
  if (kept->block_tokens % block_tokens != 0 ||
      kept->num_tokens != kept->blocks.size() * kept->block_tokens) {
    return false;
  }
  std::vector<uint32_t> positions;
  for (const uint32_t block : kept->blocks) {
    for (uint32_t at = 0; at < kept->block_tokens; at += block_tokens) {
      positions.push_back(block * kept->block_tokens + at);
    }
  }
  if (positions.size() > pool.geometry().num_pages) return false;
  STRATA_ASSIGN_OR_RETURN(
      PoolReservation reservation,
      pool.Reserve(key, static_cast<uint32_t>(positions.size()), kPromotionOwner, positions));
  if (reservation.outcome != PoolReserveOutcome::kReserved) {
    return reservation.outcome == PoolReserveOutcome::kAlreadyPresent;
  }
  std::vector<CopyRun> runs;
  for (const PoolChunkRun& run :
       PoolChunkRuns(layout, block_tokens, pool.geometry(), reservation.pages)) {
    runs.push_back({.src = kept->payload.data() + run.chunk_offset,
                    .dst = pool.PageData(0, 0) + run.pool_offset,
                    .size_bytes = run.bytes});
  }
  absl::Status copied = CopyAndWait(runs, /*digest=*/nullptr);
  if (copied.ok()) copied = pool.Commit(reservation.id);
  if (!copied.ok()) {
    pool.Abort(reservation.id);
    return fail(copied);
  }
  absl::MutexLock lock(&mu_);
  ++stats_.promoted;
  ++stats_.promoted_kept;
  stats_.promoted_bytes += kept->payload.size();
  return true;
}

DevicePoolTieringStats DevicePoolTiering::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace strata::storage
