#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "connector/src/async_loader.h"
#include "connector/src/engine_client.h"
#include "connector/src/load_pipeline.h"
#include "connector/src/log.h"
#include "connector/src/paged_kv.h"
#include "connector/src/save_pipeline.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "strata/connector.h"

namespace strata::connector {

// The worker composes its two pipelines over one session: StartLoadKv starts the step's loads
// (LoadPipeline) and reserves its saves (SavePipeline); the per-layer calls go to one or the
// other; WaitForSave closes both. Asynchronous loads go to the AsyncLoader (its own session and
// thread); GetFinished reports them.
struct WorkerConnector::Impl {
  Impl(const ConnectorOptions& o, std::unique_ptr<storage::DeviceRuntime> r, KeyHasher h)
      : options(o), runtime(std::move(r)), hasher(std::move(h)) {}

  const ConnectorOptions options;
  // Declared first: destroyed last (the arena unmap hook calls it).
  const std::unique_ptr<storage::DeviceRuntime> runtime;
  const KeyHasher hasher;
  std::unique_ptr<internal::EngineClient> client;
  // Replaced only between steps (no load or save in flight).
  std::optional<internal::PagedKvCache> cache;
  // Borrow the members above. Each waits for its copies in flight when destroyed: they name
  // the arena mappings its step holds and the engine's memory.
  std::unique_ptr<internal::LoadPipeline> load;
  std::unique_ptr<internal::SavePipeline> save;
  // Null unless options.async_loads.
  std::unique_ptr<internal::AsyncLoader> async_load;
  // Failed blocks of asynchronous loads that GetFinished reported, for the next
  // GetBlockIdsWithLoadErrors.
  std::vector<int32_t> async_failed_blocks;
  // Asynchronous loads that reached a worker without a loader (the scheduler and this worker
  // disagree on async_loads): failed at once, reported by the next GetFinished.
  std::vector<std::string> async_without_loader;

  const KvLayout& layout() const { return options.layout; }
  absl::Status CheckLayer(uint32_t layer) const {
    if (layer < layout().num_layers) return absl::OkStatus();
    return absl::InvalidArgumentError(fmt::format("layer {} of {}", layer, layout().num_layers));
  }
};

WorkerConnector::WorkerConnector(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// Nothing more is committed. The pipelines wait for copies in flight, and the asynchronous
// loader for its load in flight (which may still copy into the engine's caches: they must
// outlive the connector); closing the sessions makes the daemon abort the open reservations and
// release the leases.
WorkerConnector::~WorkerConnector() = default;

absl::StatusOr<std::unique_ptr<WorkerConnector>> WorkerConnector::Create(
    const ConnectorOptions& options, std::unique_ptr<storage::DeviceRuntime> runtime) {
  STRATA_RETURN_IF_ERROR(options.Validate());
  STRATA_ASSIGN_OR_RETURN(KeyHasher hasher, KeyHasher::Create(options.layout, options.hashing));
  STRATA_ASSIGN_OR_RETURN(runtime, internal::RuntimeOrDefault(options, std::move(runtime)));
  auto impl = std::make_unique<Impl>(options, std::move(runtime), std::move(hasher));
  storage::DeviceRuntime* rt = impl->runtime.get();
  for (const std::string& failure : rt->Capabilities().decode_check_failures) {
    Log().warn("strata connector: the device does not decode {}; the daemon decodes those chunks",
               failure);
  }
  internal::EngineClientOptions client_options =
      internal::SessionOptions(options, /*map_arena=*/true);
  client_options.hooks.on_map = [rt](void* base, uint64_t size) {
    return rt->RegisterHostMemory(base, size);
  };
  client_options.hooks.on_unmap = [rt](void* base) {
    absl::Status status = rt->UnregisterHostMemory(base);
    if (!status.ok()) Log().warn("strata connector: unregister arena: {}", status.message());
  };
  STRATA_ASSIGN_OR_RETURN(impl->client, internal::EngineClient::Create(client_options));
  STRATA_ASSIGN_OR_RETURN(
      impl->load, internal::LoadPipeline::Create(impl->options, *rt, impl->hasher, *impl->client));
  STRATA_ASSIGN_OR_RETURN(
      impl->save, internal::SavePipeline::Create(impl->options, *rt, impl->hasher, *impl->client));
  if (options.async_loads) {
    client_options.engine_id = options.engine_id + "/async-load";
    STRATA_ASSIGN_OR_RETURN(
        impl->async_load,
        internal::AsyncLoader::Create(impl->options, *rt, impl->hasher, client_options));
  }
  return std::unique_ptr<WorkerConnector>(new WorkerConnector(std::move(impl)));
}

absl::Status WorkerConnector::RegisterKvCaches(std::span<const LayerKvCache> layers) {
  Impl& s = *impl_;
  if (s.load->in_flight() || s.save->in_flight() ||
      (s.async_load != nullptr && s.async_load->in_flight() > 0)) {
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
  if (s.options.whole_blocks_only) internal::UseOpaquePages(cache);
  s.cache = std::move(cache);
  // Connect early so the first step does not pay for the handshake and the arena registration;
  // failing here is fine, the connector retries on later calls.
  (void)s.client->Connect(s.options.io_timeout);
  return absl::OkStatus();
}

absl::Status WorkerConnector::StartLoadKv(const ConnectorMetadata& metadata,
                                          const StepOptions& step) {
  Impl& s = *impl_;
  // A previous step the engine did not close: finish it first.
  s.load->Finish();
  s.save->Finish();
  s.save->SetEngineStream(step.engine_stream);
  absl::Status problem;
  if (!s.cache.has_value()) {
    problem = absl::FailedPreconditionError("StartLoadKv before RegisterKvCaches");
  } else if (metadata.block_size != s.options.block_size ||
             metadata.chunk_tokens != s.layout().chunk_tokens) {
    problem = absl::InvalidArgumentError(fmt::format(
        "metadata for blocks of {} and chunks of {} tokens; this worker has {} and {}",
        metadata.block_size, metadata.chunk_tokens, s.options.block_size, s.layout().chunk_tokens));
  }
  // Asynchronous loads go to the loader (which keeps copies of them). Every one is reported by a
  // GetFinished, failed when it cannot run (the problems above, or no loader because the
  // scheduler and this worker disagree on async_loads): the engine waits for that. The
  // synchronous ones are read in place, copied apart only when the two kinds are mixed.
  std::vector<TransferSpec> async_loads, sync_loads;
  for (const TransferSpec& spec : metadata.loads) {
    if (spec.async) async_loads.push_back(spec);
  }
  std::span<const TransferSpec> loads = metadata.loads;
  if (!async_loads.empty()) {
    for (const TransferSpec& spec : metadata.loads) {
      if (!spec.async) sync_loads.push_back(spec);
    }
    loads = sync_loads;
  }
  if (!async_loads.empty() && s.async_load == nullptr) {
    for (TransferSpec& spec : async_loads) {
      s.load->Fail(spec);
      s.async_without_loader.push_back(std::move(spec.request_id));
    }
    async_loads.clear();
    problem.Update(absl::FailedPreconditionError(
        "asynchronous loads for a worker created without async_loads: their blocks are "
        "recomputed"));
  }
  if (!problem.ok()) {
    for (const TransferSpec& spec : loads) s.load->Fail(spec);
    if (s.async_load != nullptr) s.async_load->SubmitFailed(std::move(async_loads));
    return problem;
  }
  if (!async_loads.empty()) s.async_load->Submit(*s.cache, std::move(async_loads));
  s.load->Start(*s.cache, loads, step);
  if (!metadata.saves.empty() && s.options.enable_save) s.save->Plan(*s.cache, metadata.saves);
  return absl::OkStatus();
}

absl::Status WorkerConnector::WaitForLayerLoad(uint32_t layer) {
  STRATA_RETURN_IF_ERROR(impl_->CheckLayer(layer));
  impl_->load->WaitForLayer(layer);
  return absl::OkStatus();
}

absl::Status WorkerConnector::SaveKvLayer(uint32_t layer, const StepOptions& step) {
  STRATA_RETURN_IF_ERROR(impl_->CheckLayer(layer));
  impl_->save->SaveLayer(layer, step);
  return absl::OkStatus();
}

absl::Status WorkerConnector::WaitForSave() {
  impl_->load->Finish();
  impl_->save->Wait();
  return absl::OkStatus();
}

FinishedRequests WorkerConnector::GetFinished(
    std::span<const std::string> /*finished_request_ids*/) {
  Impl& s = *impl_;
  FinishedRequests done{.finished_recving = std::move(s.async_without_loader)};
  s.async_without_loader.clear();
  done.failed_recving = done.finished_recving;  // none of those could run
  if (s.async_load == nullptr) return done;
  internal::AsyncLoadsOver over = s.async_load->TakeFinished();
  done.failed_recving.insert(done.failed_recving.end(),
                             std::make_move_iterator(over.failed_request_ids.begin()),
                             std::make_move_iterator(over.failed_request_ids.end()));
  s.async_failed_blocks.insert(s.async_failed_blocks.end(), over.failed_blocks.begin(),
                               over.failed_blocks.end());
  done.finished_recving.insert(done.finished_recving.end(),
                               std::make_move_iterator(over.request_ids.begin()),
                               std::make_move_iterator(over.request_ids.end()));
  return done;
}

std::vector<int32_t> WorkerConnector::GetBlockIdsWithLoadErrors() {
  Impl& s = *impl_;
  std::vector<int32_t> blocks = s.load->TakeFailedBlocks();
  if (s.async_failed_blocks.empty()) return blocks;
  blocks.insert(blocks.end(), s.async_failed_blocks.begin(), s.async_failed_blocks.end());
  s.async_failed_blocks.clear();
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  return blocks;
}

WorkerStats WorkerConnector::Stats() const {
  const internal::LoadStats& load = impl_->load->stats();
  const internal::SaveStats& save = impl_->save->stats();
  WorkerStats stats{.chunks_loaded = load.chunks_loaded,
                    .chunks_failed = load.chunks_failed,
                    .bytes_loaded = load.bytes_loaded,
                    .chunks_saved = save.chunks_saved,
                    .chunks_already_present = save.chunks_already_present,
                    .chunks_save_failed = save.chunks_save_failed,
                    .chunks_corrupt = load.chunks_corrupt,
                    .chunks_decoded = load.chunks_decoded,
                    .encoded_bytes_loaded = load.encoded_bytes_loaded,
                    .bytes_saved = save.bytes_saved,
                    .arena_prefaulted_bytes = impl_->client->arena_prefaulted_bytes(),
                    .session = internal::ToSessionStats(impl_->client->stats()),
                    .connected = impl_->client->connected()};
  if (const internal::AsyncLoader* async = impl_->async_load.get(); async != nullptr) {
    const internal::LoadStats more = async->stats();
    stats.chunks_loaded += more.chunks_loaded;
    stats.chunks_failed += more.chunks_failed;
    stats.bytes_loaded += more.bytes_loaded;
    stats.chunks_corrupt += more.chunks_corrupt;
    stats.chunks_decoded += more.chunks_decoded;
    stats.encoded_bytes_loaded += more.encoded_bytes_loaded;
    stats.async_requests_loaded = async->requests_over();
    stats.async_requests_in_flight = async->in_flight();
    const SessionStats loader = async->session_stats();
    stats.session.connects += loader.connects;
    stats.session.disconnects += loader.disconnects;
    stats.session.timeouts += loader.timeouts;
    stats.session.late_replies += loader.late_replies;
  }
  return stats;
}

const storage::DeviceRuntime& WorkerConnector::runtime() const { return *impl_->runtime; }

}  // namespace strata::connector
