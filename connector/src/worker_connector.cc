#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "connector/src/copy_plan.h"
#include "connector/src/engine_client.h"
#include "connector/src/log.h"
#include "connector/src/paged_kv.h"
#include "core/status_macros.h"
#include "core/xxh3_dispatch.h"
#include "fmt/format.h"
#include "strata/connector.h"

namespace strata::connector {
namespace {

using internal::ArenaExtent;
using internal::ArenaMapping;
using internal::ChunkCopy;
using internal::CopyDirection;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string_view Message(const absl::Status& status) {
  return {status.message().data(), status.message().size()};
}

// One chunk of a load or a save in flight.
struct ChunkTransfer {
  size_t request = 0;       // index into the batch's requests
  uint64_t generation = 0;  // session that issued the handle
  uint64_t handle = 0;      // lease or reservation; 0: none held
  bool planned = false;     // its copies were enqueued
  bool failed = false;
  uint64_t checksum = 0;
  uint32_t digest = 0;  // loads digested as they copy: its index in Batch::digests
  std::shared_ptr<const ArenaMapping> arena;
  std::vector<ArenaExtent> extents;
  uint32_t chunk_tokens = 0;
  uint32_t token_begin = 0;
  uint32_t num_tokens = 0;
  int64_t position_begin = 0;

  ChunkCopy Copy(std::span<const int32_t> block_ids) const {
    return {extents, chunk_tokens, token_begin, num_tokens, position_begin, block_ids};
  }
};

struct RequestTransfer {
  std::vector<int32_t> block_ids;
  int64_t token_begin = 0;
  int64_t token_end = 0;
  int64_t failed_from = 0;  // loads: positions from here to token_end failed (token_end: none)
};

struct Batch {
  std::vector<RequestTransfer> requests;
  std::vector<ChunkTransfer> chunks;
  bool copies_failed = false;
  // Loads whose copies digest what they read: one digest per planned chunk, filled by the load
  // stream (read once its copies have completed).
  std::unique_ptr<storage::CopyDigests> digests;
  // Saves: the layer the next enqueue must be for the digests to follow payload order; an
  // engine that saves layers out of order gets its checksums computed by the daemon instead.
  uint32_t next_layer = 0;
  bool layers_in_order = true;
};

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

struct WorkerConnector::Impl {
  Impl(const ConnectorOptions& o, std::unique_ptr<storage::DeviceRuntime> r, KeyHasher h)
      : options(o), runtime(std::move(r)), hasher(std::move(h)) {}

  ~Impl() {
    // Copies in flight name the arena mappings held by the batches and the engine's memory:
    // let them finish before anything goes away.
    if (load_stream) (void)load_stream->Synchronize();
    if (save_stream) (void)save_stream->Synchronize();
  }

  const ConnectorOptions options;
  // Declared first: destroyed last (the arena unmap hook calls it).
  const std::unique_ptr<storage::DeviceRuntime> runtime;
  const KeyHasher hasher;
  std::unique_ptr<internal::EngineClient> client;
  std::unique_ptr<storage::DeviceStream> load_stream;
  std::unique_ptr<storage::DeviceStream> save_stream;
  std::vector<std::unique_ptr<storage::DeviceEvent>> layer_events;  // loads, one per layer

  std::optional<internal::PagedKvCache> cache;
  std::optional<Batch> load;
  std::optional<Batch> save;
  std::vector<bool> layers_saved;
  std::optional<storage::ExternalStream> last_engine_stream;
  std::vector<int32_t> failed_blocks;
  WorkerStats stats;
  std::vector<storage::CopyRun> runs;        // scratch
  std::vector<storage::CopyRun> chunk_runs;  // scratch
  std::vector<uint32_t> digest_of;           // scratch

  const KvLayout& layout() const { return options.layout; }
  int64_t chunk_tokens() const { return options.layout.chunk_tokens; }

  // Blocks holding positions [from, to) of `block_ids` become load errors.
  void FailPositions(std::span<const int32_t> block_ids, int64_t from, int64_t to) {
    if (from >= to) return;
    const int64_t bs = options.block_size;
    const int64_t last =
        std::min<int64_t>((to - 1) / bs, static_cast<int64_t>(block_ids.size()) - 1);
    for (int64_t b = std::max<int64_t>(from / bs, 0); b <= last; ++b) {
      failed_blocks.push_back(block_ids[b]);
    }
  }
  void FailSpec(const TransferSpec& spec) {
    FailPositions(spec.block_ids, spec.token_begin, spec.token_end);
  }

  // Gives each planned chunk of `batch` a digest for its copies to fill.
  void AddDigests(Batch& batch) {
    uint32_t next = 0;
    for (ChunkTransfer& c : batch.chunks) {
      if (c.planned) c.digest = next++;
    }
    batch.digests = std::make_unique<storage::CopyDigests>(next);
  }
  // Enqueues layer `layer` of the batch's planned chunks on `stream`. With digests each chunk's
  // runs feed its digest, kept apart from (never merged with) a neighbour's, and a load's runs
  // read its whole payload in order (AppendLayerRuns' whole_payload).
  absl::Status EnqueueLayer(Batch& batch, uint32_t layer, CopyDirection direction,
                            storage::DeviceStream& stream) {
    const bool digested = batch.digests != nullptr;
    runs.clear();
    digest_of.clear();
    for (const ChunkTransfer& c : batch.chunks) {
      if (!c.planned) continue;
      chunk_runs.clear();
      internal::AppendLayerRuns(
          layout(), *cache, c.arena->base(), c.Copy(batch.requests[c.request].block_ids), layer,
          direction, digested ? chunk_runs : runs,
          /*whole_payload=*/digested && direction == CopyDirection::kArenaToEngine);
      runs.insert(runs.end(), chunk_runs.begin(), chunk_runs.end());
      digest_of.insert(digest_of.end(), chunk_runs.size(), c.digest);
    }
    return digested ? stream.CopyDigested(runs, digest_of, *batch.digests) : stream.Copy(runs);
  }

  void PlanLoads(const std::vector<TransferSpec>& specs);
  void EnqueueLoads(const StepOptions& step);
  void FinishLoad();
  void PlanSaves(const std::vector<TransferSpec>& specs);
  void EnqueueSaveLayer(uint32_t layer);
  void FinishSave();
};

WorkerConnector::WorkerConnector(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// Nothing more is copied or committed: the engine may already be freeing its memory. ~Impl waits
// for copies in flight; closing the session makes the daemon abort the open reservations and
// release the leases.
WorkerConnector::~WorkerConnector() = default;

absl::StatusOr<std::unique_ptr<WorkerConnector>> WorkerConnector::Create(
    const ConnectorOptions& options, std::unique_ptr<storage::DeviceRuntime> runtime) {
  STRATA_RETURN_IF_ERROR(options.Validate());
  STRATA_ASSIGN_OR_RETURN(KeyHasher hasher, KeyHasher::Create(options.layout, options.hashing));
  if (runtime == nullptr) {
    STRATA_ASSIGN_OR_RETURN(
        runtime, storage::CreateDeviceRuntime({.backend = options.device_backend,
                                               .device_ordinal = options.device_ordinal}));
  }
  auto impl = std::make_unique<Impl>(options, std::move(runtime), std::move(hasher));
  storage::DeviceRuntime* rt = impl->runtime.get();
  internal::EngineClientOptions client_options;
  client_options.socket_path = options.socket_path;
  client_options.engine_id = options.engine_id;
  client_options.layout = options.layout;
  client_options.map_arena = true;
  client_options.reconnect_min_backoff = options.reconnect_min_backoff;
  client_options.reconnect_max_backoff = options.reconnect_max_backoff;
  client_options.clock = options.clock;
  client_options.hooks.on_map = [rt](void* base, uint64_t size) {
    return rt->RegisterHostMemory(base, size);
  };
  client_options.hooks.on_unmap = [rt](void* base) {
    absl::Status status = rt->UnregisterHostMemory(base);
    if (!status.ok()) Log().warn("strata connector: unregister arena: {}", Message(status));
  };
  STRATA_ASSIGN_OR_RETURN(impl->client, internal::EngineClient::Create(client_options));
  STRATA_ASSIGN_OR_RETURN(impl->load_stream, rt->CreateStream("kv-load"));
  STRATA_ASSIGN_OR_RETURN(impl->save_stream, rt->CreateStream("kv-save"));
  impl->layer_events.resize(options.layout.num_layers);
  for (auto& event : impl->layer_events) {
    STRATA_ASSIGN_OR_RETURN(event, rt->CreateEvent());
  }
  return std::unique_ptr<WorkerConnector>(new WorkerConnector(std::move(impl)));
}

absl::Status WorkerConnector::RegisterKvCaches(std::span<const LayerKvCache> layers) {
  Impl& s = *impl_;
  if (s.load.has_value() || s.save.has_value()) {
    return absl::FailedPreconditionError(
        "kv caches can only be registered between steps (a load or save is in flight)");
  }
  STRATA_ASSIGN_OR_RETURN(internal::PagedKvCache cache,
                          internal::ParsePagedKvCache(s.layout(), layers));
  if (cache.geometry.block_size != s.options.block_size) {
    return absl::InvalidArgumentError(
        fmt::format("kv caches have {} tokens per block; the connector was configured with {}",
                    cache.geometry.block_size, s.options.block_size));
  }
  s.cache = std::move(cache);
  // Connect early so the first step does not pay for the handshake and the arena registration;
  // failing here is fine, the connector retries on later calls.
  (void)s.client->Connect(s.options.io_timeout);
  return absl::OkStatus();
}

void WorkerConnector::Impl::PlanLoads(const std::vector<TransferSpec>& specs) {
  Batch batch;
  const int64_t chunk = chunk_tokens();
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
        static_cast<int64_t>(spec.block_ids.size()) * options.block_size < spec.token_end) {
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
        hasher.PrefixKeys(spec.tokens, {spec.tenant_salt, spec.lora_name}, PartialChunk::kInclude);
    const std::span<const ChunkKey> keys = std::span(chain).subspan(first, last - first + 1);
    auto placed =
        client->PrepareLoad(keys, options.lease_ms, options.io_timeout, options.verify_checksums);
    if (!placed.ok()) {
      request.failed_from = spec.token_begin;
      stats.chunks_failed += keys.size();
      continue;
    }
    bool stopped = false;
    for (size_t i = 0; i < placed->value.size(); ++i) {
      internal::LoadPlacement& placement = placed->value[i];
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
        usable = internal::ValidateChunkCopy(layout(), *cache, transfer.arena->size_bytes(),
                                             transfer.Copy(request.block_ids));
      }
      if (stopped || !usable.ok()) {
        if (!stopped) {
          request.failed_from = std::min(request.failed_from, begin);
          if (placement.status.ok()) {
            Log().warn("strata connector: unusable placement for request {}: {}", spec.request_id,
                       Message(usable));
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
  load = std::move(batch);
}

void WorkerConnector::Impl::EnqueueLoads(const StepOptions& step) {
  Batch& batch = *load;
  const bool any = std::any_of(batch.chunks.begin(), batch.chunks.end(),
                               [](const ChunkTransfer& c) { return c.planned; });
  if (!any) return;
  if (options.verify_checksums && runtime->Capabilities().digested_copies) AddDigests(batch);
  absl::Status status;
  if (step.engine_stream.has_value()) status = load_stream->WaitForExternal(*step.engine_stream);
  for (uint32_t l = 0; l < layout().num_layers && status.ok(); ++l) {
    status = EnqueueLayer(batch, l, CopyDirection::kArenaToEngine, *load_stream);
    if (status.ok()) status = load_stream->Record(*layer_events[l]);
  }
  if (!status.ok()) {
    Log().warn("strata connector: enqueueing loads failed: {}", Message(status));
    batch.copies_failed = true;
  }
}

void WorkerConnector::Impl::FinishLoad() {
  if (!load.has_value()) return;
  Batch& batch = *load;
  absl::Status copied = load_stream->Synchronize();
  if (!copied.ok()) {
    Log().warn("strata connector: load copies failed: {}", Message(copied));
    batch.copies_failed = true;
  }
  for (ChunkTransfer& c : batch.chunks) {
    if (c.planned && batch.copies_failed) c.failed = true;
    if (c.planned && !c.failed && options.verify_checksums) {
      const uint64_t read =
          batch.digests != nullptr ? batch.digests->Digest(c.digest) : ArenaChecksum(c);
      if (read != c.checksum) {
        c.failed = true;
        ++stats.chunks_corrupt;
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
    auto released = client->Release(generation, handles, options.io_timeout);
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
      ++stats.chunks_loaded;
      stats.bytes_loaded += uint64_t{c.num_tokens} * layout().bytes_per_token();
    } else {
      ++stats.chunks_failed;
    }
  }
  for (const RequestTransfer& request : batch.requests) {
    FailPositions(request.block_ids, request.failed_from, request.token_end);
  }
  load.reset();
}

void WorkerConnector::Impl::PlanSaves(const std::vector<TransferSpec>& specs) {
  Batch batch;
  std::vector<internal::StoreItem> items;
  std::vector<ChunkTransfer> pending;
  const int64_t chunk = chunk_tokens();
  for (const TransferSpec& spec : specs) {
    const int64_t num_tokens = static_cast<int64_t>(spec.tokens.size());
    if (spec.token_begin < 0 || spec.token_begin % chunk != 0 ||
        spec.token_begin >= spec.token_end || spec.token_end > num_tokens ||
        (spec.token_end % chunk != 0 && spec.token_end != num_tokens) ||
        static_cast<int64_t>(spec.block_ids.size()) * options.block_size < spec.token_end) {
      Log().warn("strata connector: malformed save for request {}; skipping it", spec.request_id);
      continue;
    }
    const size_t index = batch.requests.size();
    RequestTransfer& request = batch.requests.emplace_back();
    request.block_ids = spec.block_ids;
    request.token_begin = spec.token_begin;
    request.token_end = spec.token_end;
    const std::vector<ChunkKey> chain =
        hasher.PrefixKeys(std::span(spec.tokens).first(spec.token_end),
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
           .token_ids = std::span(spec.tokens).subspan(c * chunk, transfer.chunk_tokens)});
      pending.push_back(std::move(transfer));
    }
  }
  if (items.empty()) return;
  auto placed = client->PrepareStore(items, options.io_timeout);
  if (!placed.ok()) return;  // saves are skipped while the daemon is away
  std::vector<uint64_t> to_abort;
  for (size_t i = 0; i < pending.size(); ++i) {
    internal::StorePlacement& placement = placed->value[i];
    ChunkTransfer& transfer = pending[i];
    if (!placement.status.ok()) {
      ++stats.chunks_save_failed;
      continue;
    }
    if (placement.disposition != internal::StoreDisposition::kReserved) {
      ++stats.chunks_already_present;
      continue;
    }
    transfer.generation = placed->generation;
    transfer.handle = placement.handle;
    transfer.arena = placed->arena;
    transfer.extents = std::move(placement.extents);
    absl::Status usable =
        transfer.arena == nullptr ? absl::InternalError("no arena mapped") : absl::OkStatus();
    if (usable.ok()) {
      usable =
          internal::ValidateChunkCopy(layout(), *cache, transfer.arena->size_bytes(),
                                      transfer.Copy(batch.requests[transfer.request].block_ids));
    }
    if (!usable.ok()) {
      Log().warn("strata connector: unusable store placement: {}", Message(usable));
      to_abort.push_back(transfer.handle);
      ++stats.chunks_save_failed;
      continue;
    }
    transfer.planned = true;
    batch.chunks.push_back(std::move(transfer));
  }
  if (!to_abort.empty()) (void)client->Abort(placed->generation, to_abort, options.io_timeout);
  if (!batch.chunks.empty()) {
    // Saves digest what they write whenever the runtime can: the commit then carries the
    // checksums, and the daemon does not read the payloads again.
    if (runtime->Capabilities().digested_copies) AddDigests(batch);
    save = std::move(batch);
    layers_saved.assign(layout().num_layers, false);
  }
}

void WorkerConnector::Impl::EnqueueSaveLayer(uint32_t layer) {
  Batch& batch = *save;
  if (layers_saved[layer]) return;
  layers_saved[layer] = true;
  if (batch.copies_failed) return;
  batch.layers_in_order = batch.layers_in_order && layer == batch.next_layer;
  batch.next_layer = layer + 1;
  absl::Status status = EnqueueLayer(batch, layer, CopyDirection::kEngineToArena, *save_stream);
  if (!status.ok()) {
    Log().warn("strata connector: enqueueing saves failed: {}", Message(status));
    batch.copies_failed = true;
  }
}

void WorkerConnector::Impl::FinishSave() {
  if (!save.has_value()) return;
  Batch& batch = *save;
  for (uint32_t l = 0; l < layout().num_layers; ++l) EnqueueSaveLayer(l);
  absl::Status copied = save_stream->Synchronize();
  if (!copied.ok()) {
    Log().warn("strata connector: save copies failed: {}", Message(copied));
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
      (void)client->Abort(generation, handles, options.io_timeout);
      stats.chunks_save_failed += handles.size();
      continue;
    }
    std::vector<uint64_t> checksums;
    if (batch.digests != nullptr && batch.layers_in_order) {
      for (size_t i : indexes) checksums.push_back(batch.digests->Digest(batch.chunks[i].digest));
    }
    auto committed = client->Commit(generation, handles, options.io_timeout, checksums);
    for (size_t k = 0; k < indexes.size(); ++k) {
      if (committed.ok() && (*committed)[k].ok()) {
        const ChunkTransfer& c = batch.chunks[indexes[k]];
        ++stats.chunks_saved;
        stats.bytes_saved += layout().chunk_bytes(c.chunk_tokens);
      } else {
        ++stats.chunks_save_failed;
      }
    }
  }
  save.reset();
}

absl::Status WorkerConnector::StartLoadKv(const ConnectorMetadata& metadata,
                                          const StepOptions& step) {
  Impl& s = *impl_;
  // A previous step the engine did not close: finish it first.
  s.FinishLoad();
  s.FinishSave();
  s.last_engine_stream = step.engine_stream;
  absl::Status problem;
  if (!s.cache.has_value()) {
    problem = absl::FailedPreconditionError("StartLoadKv before RegisterKvCaches");
  } else if (metadata.block_size != s.options.block_size ||
             metadata.chunk_tokens != s.layout().chunk_tokens) {
    problem = absl::InvalidArgumentError(fmt::format(
        "metadata for blocks of {} and chunks of {} tokens; this worker has {} and {}",
        metadata.block_size, metadata.chunk_tokens, s.options.block_size, s.layout().chunk_tokens));
  }
  if (!problem.ok()) {
    for (const TransferSpec& spec : metadata.loads) s.FailSpec(spec);
    return problem;
  }
  if (!metadata.loads.empty()) {
    s.PlanLoads(metadata.loads);
    s.EnqueueLoads(step);
  }
  if (!metadata.saves.empty() && s.options.enable_save) s.PlanSaves(metadata.saves);
  return absl::OkStatus();
}

absl::Status WorkerConnector::WaitForLayerLoad(uint32_t layer) {
  Impl& s = *impl_;
  if (layer >= s.layout().num_layers) {
    return absl::InvalidArgumentError(fmt::format("layer {} of {}", layer, s.layout().num_layers));
  }
  if (!s.load.has_value()) return absl::OkStatus();
  absl::Status waited = s.layer_events[layer]->Wait();
  if (!waited.ok()) s.load->copies_failed = true;
  if (layer + 1 == s.layout().num_layers) s.FinishLoad();
  return absl::OkStatus();
}

absl::Status WorkerConnector::SaveKvLayer(uint32_t layer, const StepOptions& step) {
  Impl& s = *impl_;
  if (layer >= s.layout().num_layers) {
    return absl::InvalidArgumentError(fmt::format("layer {} of {}", layer, s.layout().num_layers));
  }
  if (!s.save.has_value()) return absl::OkStatus();
  if (step.engine_stream.has_value()) s.last_engine_stream = step.engine_stream;
  const auto engine_stream = s.last_engine_stream;
  if (engine_stream.has_value() && !s.layers_saved[layer]) {
    absl::Status waited = s.save_stream->WaitForExternal(*engine_stream);
    if (!waited.ok()) s.save->copies_failed = true;
  }
  s.EnqueueSaveLayer(layer);
  return absl::OkStatus();
}

absl::Status WorkerConnector::WaitForSave() {
  Impl& s = *impl_;
  s.FinishLoad();
  if (s.save.has_value() && s.last_engine_stream.has_value()) {
    const bool all_saved =
        std::all_of(s.layers_saved.begin(), s.layers_saved.end(), [](bool b) { return b; });
    if (!all_saved) {
      absl::Status waited = s.save_stream->WaitForExternal(*s.last_engine_stream);
      if (!waited.ok()) s.save->copies_failed = true;
    }
  }
  s.FinishSave();
  return absl::OkStatus();
}

FinishedRequests WorkerConnector::GetFinished(
    std::span<const std::string> /*finished_request_ids*/) {
  return {};
}

std::vector<int32_t> WorkerConnector::GetBlockIdsWithLoadErrors() {
  std::vector<int32_t> blocks = std::move(impl_->failed_blocks);
  impl_->failed_blocks.clear();
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  return blocks;
}

WorkerStats WorkerConnector::Stats() const {
  WorkerStats stats = impl_->stats;
  stats.connected = impl_->client->connected();
  return stats;
}

const storage::DeviceRuntime& WorkerConnector::runtime() const { return *impl_->runtime; }

}  // namespace strata::connector
