#include "connector/src/load_pipeline.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "connector/src/copy_plan.h"
#include "connector/src/log.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/xxh3_dispatch.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/encoded_chunk.h"

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
  for (const storage::Codec* codec : storage::CodecRegistry::All()) {
    // No tier keeps a token-dropping codec's frames: a load never meets one.
    if (options.decode_on_device && !codec->drops_tokens() &&
        runtime.DecodesOnDevice(codec->id())) {
      pipeline->decoded_codecs_.Add(static_cast<uint32_t>(codec->id()));
    }
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
  uint64_t staging_bytes = 0;  // what the batch's encoded chunks stage
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
                                      options_.verify_checksums, decoded_codecs_);
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
      transfer.handle = placement.handle;  // 0 when the daemon leased nothing
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
      if (usable.ok() && placement.encoding.encoded()) {
        usable = PlanDecode(transfer, placement, staging_bytes);
        if (usable.ok()) {
          usable =
              ValidateChunkCopy(layout(), cache, staging_bytes, transfer.Copy(request.block_ids));
        }
      } else if (usable.ok()) {
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
  if (staging_bytes > 0) Stage(batch, staging_bytes);
  PrefaultArenaPages(runtime_, batch, CopyDirection::kArenaToEngine);
  batch_ = std::move(batch);
}

absl::Status LoadPipeline::PlanDecode(ChunkTransfer& transfer, const LoadPlacement& placement,
                                      uint64_t& staging_bytes) const {
  // EngineClient::PrepareLoad has failed every placement in a codec this load does not decode.
  const StoredEncoding& form = placement.encoding;
  STRATA_ASSIGN_OR_RETURN(transfer.codec,
                          storage::CodecRegistry::Find(static_cast<storage::CodecId>(form.codec)));
  if (form.decoded_bytes != layout().chunk_bytes(transfer.chunk_tokens)) {
    return absl::InvalidArgumentError(fmt::format(
        "the chunk's frame decodes to {} bytes; a chunk of {} tokens has {}", form.decoded_bytes,
        transfer.chunk_tokens, layout().chunk_bytes(transfer.chunk_tokens)));
  }
  STRATA_RETURN_IF_ERROR(
      ValidateExtents(transfer.extents, transfer.arena->size_bytes(), placement.size_bytes));
  // Frames start 256-byte aligned (codecs read them 4-byte aligned), and so do staged layers.
  constexpr uint64_t kAlign = 256;
  const auto aligned = [](uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; };
  transfer.frame_offset = aligned(staging_bytes);
  transfer.frame_bytes = placement.size_bytes;
  transfer.layer_offset = aligned(transfer.frame_offset + placement.size_bytes);
  const uint64_t layer_bytes = layout().layer_bytes(transfer.chunk_tokens);
  staging_bytes = transfer.layer_offset + layer_bytes;
  transfer.decoded_extents.assign(layout().num_layers, {transfer.layer_offset, layer_bytes});
  // The frame's header and layer table, for a runtime that plans its decode on the host.
  transfer.frame_head.resize(std::min<uint64_t>(
      placement.size_bytes, storage::EncodedFrameOverheadBytes(layout().num_layers)));
  uint64_t gathered = 0;
  for (const ArenaExtent& extent : transfer.extents) {
    if (gathered == transfer.frame_head.size()) break;
    const uint64_t take = std::min<uint64_t>(extent.length, transfer.frame_head.size() - gathered);
    std::memcpy(transfer.frame_head.data() + gathered, transfer.arena->base() + extent.offset,
                take);
    gathered += take;
  }
  // Layer 0 waits for its own part of the frame only (FramePart). A head that does not parse
  // stages the whole frame with layer 0 (its decodes then fail).
  transfer.frame_layer0_end = placement.size_bytes;
  absl::StatusOr<storage::EncodedChunk> head =
      storage::EncodedChunk::ParseHead(transfer.frame_head, placement.size_bytes);
  if (head.ok() && head->header().num_layers > 0) {
    transfer.frame_layer0_end = head->section_offset(0) + head->section_bytes(0);
  }
  return absl::OkStatus();
}

void LoadPipeline::Stage(TransferBatch& batch, uint64_t staging_bytes) {
  if (staging_ == nullptr || staging_->size_bytes() < staging_bytes) {
    staging_.reset();
    auto allocated = runtime_.Allocate(staging_bytes, storage::MemoryKind::kDevice);
    if (!allocated.ok()) {
      Log().warn(
          "strata connector: no room to decode compressed chunks ({} bytes of staging): {}; "
          "their blocks are recomputed",
          staging_bytes, allocated.status().message());
      for (ChunkTransfer& c : batch.chunks) {
        if (!c.encoded() || !c.planned) continue;
        c.planned = false;
        c.failed = true;
        RequestTransfer& request = batch.requests[c.request];
        request.failed_from = std::min(request.failed_from, c.position_begin);
      }
      return;
    }
    staging_ = *std::move(allocated);
  }
  batch.staging = static_cast<std::byte*>(staging_->data());
}

absl::Status LoadPipeline::EnqueueDecodes(TransferBatch& batch, uint32_t layer) {
  decodes_.clear();
  for (ChunkTransfer& c : batch.chunks) {
    if (!c.planned || !c.encoded()) continue;
    decodes_.push_back({.codec = c.codec,
                        .layout = &layout(),
                        .frame = batch.staging + c.frame_offset,
                        .frame_bytes = c.frame_bytes,
                        .frame_head = c.frame_head,
                        .layer = layer,
                        .out = batch.staging + c.layer_offset,
                        .out_bytes = layout().layer_bytes(c.chunk_tokens),
                        .failure = &c.decode_failure});
  }
  return decodes_.empty() ? absl::OkStatus() : stream_->DecodeLayers(decodes_);
}

void LoadPipeline::Enqueue(const PagedKvCache& cache, const StepOptions& step) {
  TransferBatch& batch = *batch_;
  const bool any = std::any_of(batch.chunks.begin(), batch.chunks.end(),
                               [](const ChunkTransfer& c) { return c.planned; });
  if (!any) return;
  if (options_.verify_checksums && runtime_.Capabilities().digested_copies) AddDigests(batch);
  // Layer 0's parts of the frames go to staging (ours alone) before the wait for the engine's
  // stream: only the copies into the engine's memory must follow its work.
  absl::Status status = copier_.EnqueueFrames(batch, FramePart::kLayer0, *stream_);
  if (status.ok() && step.engine_stream.has_value()) {
    status = stream_->WaitForExternal(*step.engine_stream);
  }
  for (uint32_t l = 0; l < layout().num_layers && status.ok(); ++l) {
    if (l == 1) status = copier_.EnqueueFrames(batch, FramePart::kRest, *stream_);
    if (status.ok()) status = EnqueueDecodes(batch, l);
    if (!status.ok()) break;
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
    if (c.planned && !c.failed && !c.decode_failure.ok()) {
      c.failed = true;
      ++stats_.chunks_corrupt;
      Log().warn(
          "strata connector: a loaded chunk's frame did not decode ({}); its blocks are "
          "recomputed",
          c.decode_failure.message());
    }
    // Frames always: a device that decodes them cannot check their sections (DecodeLayerOp).
    if (c.planned && !c.failed && (options_.verify_checksums || c.encoded())) {
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
      if (c.encoded()) {
        ++stats_.chunks_decoded;
        stats_.encoded_bytes_loaded += c.frame_bytes;
      }
    } else {
      ++stats_.chunks_failed;
    }
  }
  for (const RequestTransfer& request : batch.requests) {
    FailPositions(request.block_ids, request.failed_from, request.token_end);
  }
  batch_.reset();
  // The copies are over (Synchronize above): a large staging goes back.
  if (staging_ != nullptr && staging_->size_bytes() > kKeptStagingBytes) staging_.reset();
}

}  // namespace strata::connector::internal
