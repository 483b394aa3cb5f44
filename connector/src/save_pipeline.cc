#include "connector/src/save_pipeline.h"

#include <algorithm>
#include <map>
#include <utility>

#include "connector/src/copy_plan.h"
#include "connector/src/log.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"

namespace strata::connector::internal {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<std::unique_ptr<SavePipeline>> SavePipeline::Create(const ConnectorOptions& options,
                                                                   storage::DeviceRuntime& runtime,
                                                                   const KeyHasher& hasher,
                                                                   EngineClient& client) {
  std::unique_ptr<SavePipeline> pipeline(new SavePipeline(options, runtime, hasher, client));
  STRATA_ASSIGN_OR_RETURN(pipeline->stream_, runtime.CreateStream("kv-save"));
  return pipeline;
}

SavePipeline::SavePipeline(const ConnectorOptions& options, storage::DeviceRuntime& runtime,
                           const KeyHasher& hasher, EngineClient& client)
    : options_(options), runtime_(runtime), hasher_(hasher), client_(client) {}

SavePipeline::~SavePipeline() {
  if (stream_) (void)stream_->Synchronize();
}

void SavePipeline::Plan(const PagedKvCache& cache, std::span<const TransferSpec> specs) {
  TransferBatch batch;
  std::vector<StoreItem> items;
  std::vector<ChunkTransfer> pending;
  const int64_t chunk = layout().chunk_tokens;
  for (const TransferSpec& spec : specs) {
    const int64_t num_tokens = static_cast<int64_t>(spec.tokens.size());
    if (spec.token_begin < 0 || spec.token_begin % chunk != 0 ||
        spec.token_begin >= spec.token_end || spec.token_end > num_tokens ||
        (spec.token_end % chunk != 0 && spec.token_end != num_tokens) ||
        static_cast<int64_t>(spec.block_ids.size()) * options_.block_size < spec.token_end) {
      Log().warn("strata connector: malformed save for request {}; skipping it", spec.request_id);
      continue;
    }
    const size_t index = batch.requests.size();
    RequestTransfer& request = batch.requests.emplace_back();
    request.block_ids = spec.block_ids;
    request.token_begin = spec.token_begin;
    request.token_end = spec.token_end;
    const std::vector<ChunkKey> chain =
        hasher_.PrefixKeys(std::span(spec.tokens).first(spec.token_end),
                           {spec.tenant_salt, spec.lora_name}, PartialChunk::kInclude);
    for (int64_t c = spec.token_begin / chunk; c < CeilDiv(spec.token_end, chunk); ++c) {
      ChunkTransfer transfer;
      transfer.request = index;
      transfer.chunk_tokens = static_cast<uint32_t>(std::min(chunk, spec.token_end - c * chunk));
      transfer.token_begin = 0;
      transfer.num_tokens = transfer.chunk_tokens;
      transfer.position_begin = c * chunk;
      items.push_back(
          {.key = chain[c],
           .num_tokens = transfer.chunk_tokens,
           .parent = c > 0 ? chain[c - 1] : ChunkKey(),
           .tenant = spec.tenant_salt,
           .hold_ms = spec.hold_ms,
           .stream_to = spec.stream_to,
           .token_ids = std::span(spec.tokens).subspan(c * chunk, transfer.chunk_tokens)});
      pending.push_back(std::move(transfer));
    }
  }
  if (items.empty()) return;
  auto placed = client_.PrepareStore(items, options_.io_timeout);
  if (!placed.ok()) return;  // saves are skipped while the daemon is away
  std::vector<uint64_t> to_abort;
  for (size_t i = 0; i < pending.size(); ++i) {
    StorePlacement& placement = placed->value[i];
    ChunkTransfer& transfer = pending[i];
    if (!placement.status.ok()) {
      ++stats_.chunks_save_failed;
      continue;
    }
    if (placement.disposition != StoreDisposition::kReserved) {
      ++stats_.chunks_already_present;
      continue;
    }
    transfer.generation = placed->generation;
    transfer.handle = placement.handle;
    transfer.arena = placed->arena;
    transfer.extents = std::move(placement.extents);
    absl::Status usable =
        transfer.arena == nullptr ? absl::InternalError("no arena mapped") : absl::OkStatus();
    if (usable.ok()) {
      usable = ValidateChunkCopy(layout(), cache, transfer.arena->size_bytes(),
                                 transfer.Copy(batch.requests[transfer.request].block_ids));
    }
    if (!usable.ok()) {
      Log().warn("strata connector: unusable store placement: {}", usable.message());
      to_abort.push_back(transfer.handle);
      ++stats_.chunks_save_failed;
      continue;
    }
    transfer.planned = true;
    if (placement.streamed) streamed_handles_.push_back(transfer.handle);
    batch.chunks.push_back(std::move(transfer));
  }
  if (!to_abort.empty()) (void)client_.Abort(placed->generation, to_abort, options_.io_timeout);
  if (!batch.chunks.empty()) {
    // Saves digest what they write whenever the runtime can: the commit then carries the
    // checksums, and the daemon does not read the payloads again.
    if (runtime_.Capabilities().digested_copies) AddDigests(batch);
    PrefaultArenaPages(runtime_, batch, CopyDirection::kEngineToArena);
    cache_ = &cache;
    batch_ = std::move(batch);
    layers_saved_.assign(layout().num_layers, false);
    streamed_generation_ = placed->generation;
    layers_announced_ = 0;
    while (!streamed_handles_.empty() && layer_events_.size() < layout().num_layers) {
      absl::StatusOr<std::unique_ptr<storage::DeviceEvent>> event = runtime_.CreateEvent();
      if (!event.ok()) {
        // The commit still streams every layer, only later.
        Log().warn("strata connector: no events to follow streamed saves: {}",
                   event.status().message());
        streamed_handles_.clear();
        break;
      }
      layer_events_.push_back(*std::move(event));
    }
  } else {
    streamed_handles_.clear();
  }
}

void SavePipeline::AnnounceLayers() {
  if (streamed_handles_.empty() || batch_->copies_failed) return;
  const uint32_t before = layers_announced_;
  while (layers_announced_ < layout().num_layers && layers_saved_[layers_announced_]) {
    absl::StatusOr<bool> landed = layer_events_[layers_announced_]->Query();
    if (!landed.ok() || !*landed) break;
    ++layers_announced_;
  }
  if (layers_announced_ == before) return;
  absl::Status told = client_.LayersSaved(streamed_generation_, streamed_handles_,
                                          layers_announced_, options_.io_timeout);
  if (!told.ok()) {
    // The commit streams the rest; a daemon that is gone aborts the stream with the session.
    Log().debug("strata connector: announcing saved layers: {}", told.message());
  }
}

void SavePipeline::EnqueueLayer(uint32_t layer) {
  TransferBatch& batch = *batch_;
  if (layers_saved_[layer]) return;
  layers_saved_[layer] = true;
  if (batch.copies_failed) return;
  batch.layers_in_order = batch.layers_in_order && layer == batch.next_layer;
  batch.next_layer = layer + 1;
  absl::Status status =
      copier_.Enqueue(layout(), *cache_, batch, layer, CopyDirection::kEngineToArena, *stream_);
  if (status.ok() && !streamed_handles_.empty()) status = stream_->Record(*layer_events_[layer]);
  if (!status.ok()) {
    Log().warn("strata connector: enqueueing saves failed: {}", status.message());
    batch.copies_failed = true;
  }
}

void SavePipeline::SaveLayer(uint32_t layer, const StepOptions& step) {
  if (!batch_.has_value()) return;
  if (step.engine_stream.has_value()) engine_stream_ = step.engine_stream;
  if (engine_stream_.has_value() && !layers_saved_[layer]) {
    absl::Status waited = stream_->WaitForExternal(*engine_stream_);
    if (!waited.ok()) batch_->copies_failed = true;
  }
  EnqueueLayer(layer);
  AnnounceLayers();
}

void SavePipeline::Wait() {
  if (batch_.has_value() && engine_stream_.has_value()) {
    const bool all_saved =
        std::all_of(layers_saved_.begin(), layers_saved_.end(), [](bool b) { return b; });
    if (!all_saved) {
      absl::Status waited = stream_->WaitForExternal(*engine_stream_);
      if (!waited.ok()) batch_->copies_failed = true;
    }
  }
  Finish();
}

void SavePipeline::Finish() {
  if (!batch_.has_value()) return;
  TransferBatch& batch = *batch_;
  for (uint32_t l = 0; l < layout().num_layers; ++l) EnqueueLayer(l);
  absl::Status copied = stream_->Synchronize();
  if (!copied.ok()) {
    Log().warn("strata connector: save copies failed: {}", copied.message());
    batch.copies_failed = true;
  }
  std::map<uint64_t, std::vector<size_t>> by_generation;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    by_generation[batch.chunks[i].generation].push_back(i);
  }
  for (const auto& [generation, indexes] : by_generation) {
    std::vector<uint64_t> handles;
    for (size_t i : indexes) handles.push_back(batch.chunks[i].handle);
    if (batch.copies_failed) {
      (void)client_.Abort(generation, handles, options_.io_timeout);
      stats_.chunks_save_failed += handles.size();
      continue;
    }
    std::vector<uint64_t> checksums;
    if (batch.digests != nullptr && batch.layers_in_order) {
      for (size_t i : indexes) checksums.push_back(batch.digests->Digest(batch.chunks[i].digest));
    }
    auto committed = client_.Commit(generation, handles, options_.io_timeout, checksums);
    for (size_t k = 0; k < indexes.size(); ++k) {
      if (committed.ok() && (*committed)[k].ok()) {
        const ChunkTransfer& c = batch.chunks[indexes[k]];
        ++stats_.chunks_saved;
        stats_.bytes_saved += layout().chunk_bytes(c.chunk_tokens);
      } else {
        ++stats_.chunks_save_failed;
      }
    }
  }
  batch_.reset();
  cache_ = nullptr;
  streamed_handles_.clear();
}

}  // namespace strata::connector::internal
