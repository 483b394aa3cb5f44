#include "connector/src/load_pipeline.h"

#include <algorithm>
#include <map>
#include <utility>

#include "connector/src/copy_plan.h"
#include "connector/src/log.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/xxh3_dispatch.h"

namespace strata::connector::internal {
namespace {

// xxh3-64 of a chunk's payload read from the arena (when the copies could not digest it).
uint64_t ArenaChecksum(const ChunkTransfer& chunk) {
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const ArenaExtent& e : chunk.extents) {
    XXH3_64bits_update(&state, chunk.arena->base() + e.offset, e.length);
  }
  return XXH3_64bits_digest(&state);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoadPipeline>> LoadPipeline::Create(const ConnectorOptions& options,
                                                                   storage::DeviceRuntime& runtime,
                                                                   const KeyHasher& hasher,
                                                                   EngineClient& client) {
  std::unique_ptr<LoadPipeline> pipeline(new LoadPipeline(options, runtime, hasher, client));
  STRATA_ASSIGN_OR_RETURN(pipeline->stream_, runtime.CreateStream("kv-load"));
  pipeline->layer_events_.resize(options.layout.num_layers);
  for (auto& event : pipeline->layer_events_) {
    STRATA_ASSIGN_OR_RETURN(event, runtime.CreateEvent());
  }
  return pipeline;
}

LoadPipeline::LoadPipeline(const ConnectorOptions& options, storage::DeviceRuntime& runtime,
                           const KeyHasher& hasher, EngineClient& client)
    : options_(options), runtime_(runtime), hasher_(hasher), client_(client) {}

LoadPipeline::~LoadPipeline() {
  if (stream_) (void)stream_->Synchronize();
}

void LoadPipeline::FailPositions(std::span<const int32_t> block_ids, int64_t from, int64_t to) {
  if (from >= to) return;
  const int64_t bs = options_.block_size;
  const int64_t last = std::min<int64_t>((to - 1) / bs, static_cast<int64_t>(block_ids.size()) - 1);
  for (int64_t b = std::max<int64_t>(from / bs, 0); b <= last; ++b) {
    failed_blocks_.push_back(block_ids[b]);
  }
}

void LoadPipeline::Fail(const TransferSpec& spec) {
  FailPositions(spec.block_ids, spec.token_begin, spec.token_end);
}

std::vector<int32_t> LoadPipeline::TakeFailedBlocks() {
  std::vector<int32_t> blocks = std::move(failed_blocks_);
  failed_blocks_.clear();
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  return blocks;
}

void LoadPipeline::Start(const PagedKvCache& cache, std::span<const TransferSpec> specs,
                         const StepOptions& step) {
  if (specs.empty()) return;
  Plan(cache, specs);
  Enqueue(cache, step);
}

void LoadPipeline::Plan(const PagedKvCache& cache, std::span<const TransferSpec> specs) {
  TransferBatch batch;
  const int64_t chunk = layout().chunk_tokens;
  for (const TransferSpec& spec : specs) {
    const size_t index = batch.requests.size();
    RequestTransfer& request = batch.requests.emplace_back();
    request.block_ids = spec.block_ids;
    request.token_begin = spec.token_begin;
    request.token_end = spec.token_end;
    request.failed_from = spec.token_end;
    const int64_t num_tokens = static_cast<int64_t>(spec.tokens.size());
    if (spec.fail || spec.token_begin < 0 || spec.token_begin >= spec.token_end ||
        spec.token_end > num_tokens ||
        static_cast<int64_t>(spec.block_ids.size()) * options_.block_size < spec.token_end) {
      if (!spec.fail) {
        Log().warn("strata connector: malformed load for request {}; recomputing it",
                   spec.request_id);
      }
      request.failed_from = spec.token_begin;
      continue;
    }
    const int64_t first = spec.token_begin / chunk;
    const int64_t last = (spec.token_end - 1) / chunk;
    const std::vector<ChunkKey> chain =
        hasher_.PrefixKeys(spec.tokens, {spec.tenant_salt, spec.lora_name}, PartialChunk::kInclude);
    const std::span<const ChunkKey> keys = std::span(chain).subspan(first, last - first + 1);
    auto placed = client_.PrepareLoad(keys, options_.lease_ms, options_.io_timeout,
                                      options_.verify_checksums);
    if (!placed.ok()) {
      request.failed_from = spec.token_begin;
      stats_.chunks_failed += keys.size();
      continue;
    }
    bool stopped = false;
    for (size_t i = 0; i < placed->value.size(); ++i) {
      LoadPlacement& placement = placed->value[i];
      const int64_t c = first + static_cast<int64_t>(i);
      ChunkTransfer transfer;
      transfer.request = index;
      transfer.generation = placed->generation;
      transfer.handle = placement.status.ok() ? placement.handle : 0;
      transfer.arena = placed->arena;
      transfer.extents = std::move(placement.extents);
      transfer.checksum = placement.checksum;
      transfer.chunk_tokens = static_cast<uint32_t>(std::min(chunk, num_tokens - c * chunk));
      const int64_t begin = std::max(spec.token_begin, c * chunk);
      const int64_t end = std::min(spec.token_end, c * chunk + transfer.chunk_tokens);
      transfer.token_begin = static_cast<uint32_t>(begin - c * chunk);
      transfer.num_tokens = static_cast<uint32_t>(end - begin);
      transfer.position_begin = begin;
      absl::Status usable = placement.status;
      if (usable.ok() && transfer.arena == nullptr) {
        usable = absl::InternalError("no arena mapped");
      }
      if (usable.ok()) {
        usable = ValidateChunkCopy(layout(), cache, transfer.arena->size_bytes(),
                                   transfer.Copy(request.block_ids));
      }
      if (stopped || !usable.ok()) {
        if (!stopped) {
          request.failed_from = std::min(request.failed_from, begin);
          if (placement.status.ok()) {
            Log().warn("strata connector: unusable placement for request {}: {}", spec.request_id,
                       usable.message());
          }
        }
        stopped = true;
        transfer.failed = true;
      } else {
        transfer.planned = true;
      }
      batch.chunks.push_back(std::move(transfer));
    }
  }
  PrefaultArenaPages(runtime_, batch, CopyDirection::kArenaToEngine);
  batch_ = std::move(batch);
}

void LoadPipeline::Enqueue(const PagedKvCache& cache, const StepOptions& step) {
  TransferBatch& batch = *batch_;
  const bool any = std::any_of(batch.chunks.begin(), batch.chunks.end(),
                               [](const ChunkTransfer& c) { return c.planned; });
  if (!any) return;
  if (options_.verify_checksums && runtime_.Capabilities().digested_copies) AddDigests(batch);
  absl::Status status;
  if (step.engine_stream.has_value()) status = stream_->WaitForExternal(*step.engine_stream);
  for (uint32_t l = 0; l < layout().num_layers && status.ok(); ++l) {
    status = copier_.Enqueue(layout(), cache, batch, l, CopyDirection::kArenaToEngine, *stream_);
    if (status.ok()) status = stream_->Record(*layer_events_[l]);
  }
  if (!status.ok()) {
    Log().warn("strata connector: enqueueing loads failed: {}", status.message());
    batch.copies_failed = true;
  }
}

void LoadPipeline::WaitForLayer(uint32_t layer) {
  if (!batch_.has_value()) return;
  absl::Status waited = layer_events_[layer]->Wait();
  if (!waited.ok()) batch_->copies_failed = true;
  if (layer + 1 == layout().num_layers) Finish();
}

void LoadPipeline::Finish() {
  if (!batch_.has_value()) return;
  TransferBatch& batch = *batch_;
  absl::Status copied = stream_->Synchronize();
  if (!copied.ok()) {
    Log().warn("strata connector: load copies failed: {}", copied.message());
    batch.copies_failed = true;
  }
  for (ChunkTransfer& c : batch.chunks) {
    if (c.planned && batch.copies_failed) c.failed = true;
    if (c.planned && !c.failed && options_.verify_checksums) {
      const uint64_t read =
          batch.digests != nullptr ? batch.digests->Digest(c.digest) : ArenaChecksum(c);
      if (read != c.checksum) {
        c.failed = true;
        ++stats_.chunks_corrupt;
        Log().warn(
            "strata connector: a loaded chunk's bytes do not match its checksum ({:016x}, read "
            "{:016x}); its blocks are recomputed",
            c.checksum, read);
      }
    }
  }
  // Release every lease, one round trip per session; a lease that expired before its release
  // (ABORTED) or could not be released cleanly fails its chunk: its bytes may have been reused.
  std::map<uint64_t, std::vector<size_t>> by_generation;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    if (batch.chunks[i].handle != 0) by_generation[batch.chunks[i].generation].push_back(i);
  }
  for (const auto& [generation, indexes] : by_generation) {
    std::vector<uint64_t> handles;
    for (size_t i : indexes) handles.push_back(batch.chunks[i].handle);
    auto released = client_.Release(generation, handles, options_.io_timeout);
    for (size_t k = 0; k < indexes.size(); ++k) {
      const bool clean = released.ok() && (*released)[k].ok();
      if (!clean) batch.chunks[indexes[k]].failed = true;
    }
  }
  for (const ChunkTransfer& c : batch.chunks) {
    RequestTransfer& request = batch.requests[c.request];
    if (c.failed) {
      request.failed_from = std::min(request.failed_from, c.position_begin);
    }
  }
  for (const ChunkTransfer& c : batch.chunks) {
    const RequestTransfer& request = batch.requests[c.request];
    if (c.planned && c.position_begin < request.failed_from) {
      ++stats_.chunks_loaded;
      stats_.bytes_loaded += uint64_t{c.num_tokens} * layout().bytes_per_token();
    } else {
      ++stats_.chunks_failed;
    }
  }
  for (const RequestTransfer& request : batch.requests) {
    FailPositions(request.block_ids, request.failed_from, request.token_end);
  }
  batch_.reset();
}

}  // namespace strata::connector::internal
