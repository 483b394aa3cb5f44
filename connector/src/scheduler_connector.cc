#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "connector/src/engine_client.h"
#include "connector/src/log.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "strata/connector.h"

namespace strata::connector {
namespace {

// What the scheduler remembers of one request between its calls.
struct RequestState {
  std::vector<uint32_t> tokens;  // the prompt
  // Its partial last chunk has a key (store_partial_chunks, or a disaggregated prefill).
  bool partial = false;
  // Prefilled for another engine's decode (KvTransfer::kSend): its chunks are held.
  bool send = false;
  std::string decode_node;  // send: where its chunks stream as they are saved ("": nowhere)
  std::string tenant_salt;
  std::string lora_name;
  // The last GetNumNewMatchedTokens: where its tokens start and how many it offered.
  int64_t lookup_computed = 0;
  int64_t matched = 0;
  bool load_async = false;  // what the last GetNumNewMatchedTokens said
  // Per chunk: the last lookup found it cached (a save skips it).
  std::vector<bool> known_cached;
  std::vector<int32_t> block_ids;
  // Chunks below this one were saved or found cached.
  int64_t next_save_chunk = 0;
  std::optional<TransferSpec> pending_load;
};

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

struct SchedulerConnector::Impl {
  Impl(const ConnectorOptions& o, KeyHasher h, std::unique_ptr<internal::EngineClient> c)
      : options(o), hasher(std::move(h)), client(std::move(c)) {}

  const ConnectorOptions options;
  const KeyHasher hasher;
  const std::unique_ptr<internal::EngineClient> client;

  absl::Mutex mu;
  absl::flat_hash_map<std::string, RequestState> requests ABSL_GUARDED_BY(mu);
  // Source nodes the daemon did not know, logged once each (bounded).
  absl::flat_hash_set<std::string> unknown_sources_logged ABSL_GUARDED_BY(mu);
  // Loads that failed to plan for requests the scheduler did not know.
  std::vector<TransferSpec> orphan_loads ABSL_GUARDED_BY(mu);
  SchedulerStats stats ABSL_GUARDED_BY(mu);

  int64_t chunk_tokens() const { return options.layout.chunk_tokens; }
  // Whether a request's partial last chunk has a key (never when blocks are opaque pages).
  bool Partial(KvTransfer transfer) const {
    return !options.whole_blocks_only &&
           (options.store_partial_chunks || transfer != KvTransfer::kNone);
  }
  static PartialChunk ToPartialChunk(bool partial) {
    return partial ? PartialChunk::kInclude : PartialChunk::kExclude;
  }
  // Chunks of a prompt of `prompt_len` tokens that carry keys.
  int64_t NumChunks(int64_t prompt_len, bool partial) const {
    return partial ? CeilDiv(prompt_len, chunk_tokens()) : prompt_len / chunk_tokens();
  }
  // The end of the chunk holding position `position` (the last chunk may be partial).
  int64_t ChunkEnd(int64_t position, int64_t prompt_len) const {
    return std::min((position / chunk_tokens() + 1) * chunk_tokens(), prompt_len);
  }

  // The first of `block_ids[0, end_block)` after the last null block (ConnectorOptions::
  // null_block_id): a sliding-window group's blocks before it were freed. 0 when none is null.
  int64_t FirstLiveBlock(std::span<const int32_t> block_ids, int64_t end_block) const {
    if (options.null_block_id < 0) return 0;
    for (int64_t b = end_block; b > 0; --b) {
      if (block_ids[b - 1] == options.null_block_id) return b;
    }
    return 0;
  }

  // A load that could not be planned: the worker reports blocks [begin, end) as failed.
  // `async`: the engine was promised an asynchronous load, and waits for the workers to report
  // the request.
  TransferSpec FailedLoad(std::string_view request_id, std::span<const int32_t> block_ids,
                          int64_t begin, int64_t end, bool async = false) const {
    TransferSpec spec;
    spec.request_id = std::string(request_id);
    spec.block_ids.assign(block_ids.begin(), block_ids.end());
    const int64_t covered = static_cast<int64_t>(block_ids.size()) * options.block_size;
    spec.token_begin = std::min(begin, covered);
    spec.token_end = std::min(end, covered);
    spec.fail = true;
    spec.async = async;
    return spec;
  }

  // Drops a finished request. An asynchronous load planned for it still goes to the workers,
  // failed (nothing is read), because the engine frees the blocks of a request that waits for
  // one only when the workers report it; a synchronous one is dropped with the request.
  void ForgetLocked(const std::string& request_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    auto it = requests.find(request_id);
    if (it == requests.end()) return;
    std::optional<TransferSpec>& load = it->second.pending_load;
    if (load.has_value() && load->async) {
      load->fail = true;
      orphan_loads.push_back(std::move(*load));
    }
    requests.erase(it);
  }
};

SchedulerConnector::SchedulerConnector(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SchedulerConnector::~SchedulerConnector() = default;

absl::StatusOr<std::unique_ptr<SchedulerConnector>> SchedulerConnector::Create(
    const ConnectorOptions& options) {
  STRATA_RETURN_IF_ERROR(options.Validate());
  STRATA_ASSIGN_OR_RETURN(KeyHasher hasher, KeyHasher::Create(options.layout, options.hashing));
  const internal::EngineClientOptions client_options =
      internal::SessionOptions(options, /*map_arena=*/false);
  STRATA_ASSIGN_OR_RETURN(auto client, internal::EngineClient::Create(client_options));
  return std::unique_ptr<SchedulerConnector>(new SchedulerConnector(
      std::make_unique<Impl>(options, std::move(hasher), std::move(client))));
}

MatchResult SchedulerConnector::GetNumNewMatchedTokens(const RequestInfo& request,
                                                       int64_t num_computed_tokens) {
  Impl& s = *impl_;
  const int64_t prompt_len = static_cast<int64_t>(request.prompt_tokens.size());
  const int64_t chunk = s.chunk_tokens();
  const bool partial = s.Partial(request.kv_transfer);
  const bool receive = request.kv_transfer == KvTransfer::kReceive;
  const int64_t num_chunks = s.NumChunks(prompt_len, partial);
  num_computed_tokens = std::max<int64_t>(num_computed_tokens, 0);
  // Chunks wholly inside what the engine has are not looked up.
  const int64_t first_chunk = num_computed_tokens / chunk;
  // The most the cache could add: up to the end of the last keyed chunk, one token short of the
  // prompt's end.
  const int64_t ceiling = std::min(std::min(num_chunks * chunk, prompt_len), prompt_len - 1);

  internal::LookupHit hit;
  bool looked_up = false;
  if (s.options.enable_load && first_chunk < num_chunks && ceiling > num_computed_tokens) {
    const KeyExtras extras{request.tenant_salt, request.lora_name};
    const std::vector<ChunkKey> keys =
        s.hasher.PrefixKeys(request.prompt_tokens, extras, Impl::ToPartialChunk(partial));
    const std::span<const ChunkKey> wanted = std::span(keys).subspan(first_chunk);
    // The tokens the looked-up chunks cover: the last keyed chunk may be partial.
    const int64_t covered = std::min(num_chunks * chunk, prompt_len) - first_chunk * chunk;
    absl::StatusOr<internal::LookupHit> hits = s.client->LookupChain(
        wanted, receive ? s.options.transfer_lookup_budget : s.options.lookup_budget,
        {.tenant = request.tenant_salt,
         .tokens = static_cast<uint32_t>(covered),
         .source_node = receive ? request.source_node : ""});
    looked_up = true;
    absl::MutexLock lock(&s.mu);
    ++s.stats.lookups;
    if (hits.ok()) {
      hit = *hits;
    } else {
      ++s.stats.lookup_failures;
      if (hits.status().code() == absl::StatusCode::kNotFound && receive) {
        ++s.stats.unknown_sources;
        if (s.unknown_sources_logged.size() < 64 &&
            s.unknown_sources_logged.insert(std::string(request.source_node)).second) {
          Log().error(
              "strata connector: request {} was prefilled elsewhere, but {}; its prompt "
              "is recomputed",
              request.request_id, hits.status().message());
        }
      }
    }
  }

  const int64_t hit_end = std::min((first_chunk + hit.chunks) * chunk, prompt_len);
  int64_t usable = std::min(hit_end, prompt_len - 1);
  // Opaque blocks are loaded whole: a hit that would end inside a block (one token short of a
  // prompt of whole chunks) ends at the block before.
  if (s.options.whole_blocks_only) usable -= usable % static_cast<int64_t>(s.options.block_size);
  const int64_t matched = hit.chunks > 0 ? std::max<int64_t>(0, usable - num_computed_tokens) : 0;
  // Asynchronous when a chunk the load reads is not in the daemon's host tier.
  const int64_t host_end = (first_chunk + hit.host_chunks) * chunk;
  // A received prefill comes from a peer: asynchronous whatever the tier says.
  const bool load_async =
      s.options.async_loads && matched > 0 && (receive || host_end < num_computed_tokens + matched);

  absl::MutexLock lock(&s.mu);
  RequestState& state = s.requests[std::string(request.request_id)];
  if (state.tokens.size() != request.prompt_tokens.size() ||
      !std::equal(state.tokens.begin(), state.tokens.end(), request.prompt_tokens.begin())) {
    state.tokens.assign(request.prompt_tokens.begin(), request.prompt_tokens.end());
    state.known_cached.assign(num_chunks, false);
    state.next_save_chunk = 0;
  }
  if (state.partial != partial) {
    state.partial = partial;
    state.known_cached.resize(num_chunks, false);
  }
  state.tenant_salt = std::string(request.tenant_salt);
  state.lora_name = std::string(request.lora_name);
  state.send = request.kv_transfer == KvTransfer::kSend;
  state.decode_node = state.send ? std::string(request.decode_node) : std::string();
  state.lookup_computed = num_computed_tokens;
  state.matched = matched;
  state.load_async = load_async;
  if (looked_up) {
    for (int64_t c = first_chunk; c < first_chunk + hit.chunks; ++c) state.known_cached[c] = true;
  }
  s.stats.lookup_hit_tokens += matched;
  if (load_async) ++s.stats.async_loads_offered;
  return {matched, load_async};
}

uint32_t SchedulerConnector::Prefetch(const RequestInfo& request) {
  Impl& s = *impl_;
  if (!s.options.enable_load) return 0;
  const KeyExtras extras{request.tenant_salt, request.lora_name};
  const std::vector<ChunkKey> keys = s.hasher.PrefixKeys(
      request.prompt_tokens, extras, Impl::ToPartialChunk(s.Partial(request.kv_transfer)));
  if (keys.empty()) return 0;
  absl::StatusOr<uint32_t> queued = s.client->Prefetch(keys, s.options.lookup_budget);
  absl::MutexLock lock(&s.mu);
  ++s.stats.prefetches;
  if (!queued.ok()) {
    ++s.stats.prefetch_failures;
    return 0;
  }
  s.stats.prefetch_chunks += *queued;
  return *queued;
}

absl::Status SchedulerConnector::UpdateStateAfterAlloc(std::string_view request_id,
                                                       std::span<const int32_t> block_ids,
                                                       int64_t num_external_tokens) {
  Impl& s = *impl_;
  absl::MutexLock lock(&s.mu);
  auto it = s.requests.find(std::string(request_id));
  if (num_external_tokens <= 0) {
    if (it != s.requests.end()) {
      it->second.pending_load.reset();
      it->second.block_ids.assign(block_ids.begin(), block_ids.end());
    }
    return absl::OkStatus();
  }
  if (it == s.requests.end()) {
    // The engine will read these blocks as loaded: make the worker report them instead.
    s.orphan_loads.push_back(s.FailedLoad(request_id, block_ids, 0, num_external_tokens));
    return absl::FailedPreconditionError(
        fmt::format("request {}: {} external tokens, but no lookup offered any", request_id,
                    num_external_tokens));
  }
  RequestState& state = it->second;
  state.block_ids.assign(block_ids.begin(), block_ids.end());
  const int64_t begin = state.lookup_computed;
  const int64_t end = begin + num_external_tokens;
  if (num_external_tokens > state.matched) {
    state.pending_load = s.FailedLoad(request_id, block_ids, begin, end, state.load_async);
    return absl::InvalidArgumentError(
        fmt::format("request {}: {} external tokens, but the lookup offered {}", request_id,
                    num_external_tokens, state.matched));
  }
  if (static_cast<int64_t>(block_ids.size()) * s.options.block_size < end) {
    state.pending_load = s.FailedLoad(request_id, block_ids, begin, end, state.load_async);
    return absl::InvalidArgumentError(
        fmt::format("request {}: {} blocks of {} tokens do not cover positions up to {}",
                    request_id, block_ids.size(), s.options.block_size, end));
  }
  // Positions in null blocks need no KV: the engine never reads them.
  const int64_t block_size = s.options.block_size;
  const int64_t live_begin =
      std::max(begin, s.FirstLiveBlock(block_ids, CeilDiv(end, block_size)) * block_size);
  if (live_begin >= end) {
    // Nothing to copy; an asynchronous load still goes out (empty) so the workers report it.
    if (state.load_async) state.pending_load = s.FailedLoad(request_id, {}, 0, 0, true);
    return absl::OkStatus();
  }
  const int64_t prompt_len = static_cast<int64_t>(state.tokens.size());
  TransferSpec spec;
  spec.request_id = std::string(request_id);
  spec.tokens.assign(state.tokens.begin(), state.tokens.begin() + s.ChunkEnd(end - 1, prompt_len));
  spec.tenant_salt = state.tenant_salt;
  spec.lora_name = state.lora_name;
  spec.token_begin = live_begin;
  spec.token_end = end;
  spec.block_ids.assign(block_ids.begin(), block_ids.begin() + CeilDiv(end, s.options.block_size));
  spec.async = state.load_async;
  state.pending_load = std::move(spec);
  return absl::OkStatus();
}

absl::Status SchedulerConnector::MakeLoadAsync(std::string_view request_id) {
  Impl& s = *impl_;
  if (!s.options.async_loads) {
    return absl::FailedPreconditionError("connector: asynchronous loads are off (async_loads)");
  }
  absl::MutexLock lock(&s.mu);
  auto it = s.requests.find(std::string(request_id));
  if (it == s.requests.end()) {
    return absl::NotFoundError(fmt::format("request {}: no lookup recorded it", request_id));
  }
  if (!it->second.load_async && it->second.matched > 0) ++s.stats.async_loads_offered;
  it->second.load_async = it->second.matched > 0;
  return absl::OkStatus();
}

ConnectorMetadata SchedulerConnector::BuildConnectorMeta(const SchedulerStep& step) {
  Impl& s = *impl_;
  const int64_t chunk = s.chunk_tokens();
  ConnectorMetadata meta;
  meta.block_size = s.options.block_size;
  meta.chunk_tokens = s.options.layout.chunk_tokens;
  meta.finished_request_ids = step.finished_request_ids;

  absl::MutexLock lock(&s.mu);
  for (const std::string& id : step.finished_request_ids) s.ForgetLocked(id);

  for (auto& [id, state] : s.requests) {
    if (state.pending_load.has_value()) {
      meta.loads.push_back(std::move(*state.pending_load));
      state.pending_load.reset();
    }
  }
  for (TransferSpec& spec : s.orphan_loads) meta.loads.push_back(std::move(spec));
  s.orphan_loads.clear();
  std::sort(meta.loads.begin(), meta.loads.end(), [](const TransferSpec& a, const TransferSpec& b) {
    return a.request_id < b.request_id;
  });
  s.stats.loads_planned += meta.loads.size();

  for (const ScheduledRequest& request : step.requests) {
    auto it = s.requests.find(request.request_id);
    if (it == s.requests.end()) {
      if (request.prompt_tokens.empty()) continue;
      RequestState fresh;
      fresh.tokens = request.prompt_tokens;
      fresh.tenant_salt = request.tenant_salt;
      fresh.lora_name = request.lora_name;
      fresh.partial = s.Partial(KvTransfer::kNone);
      fresh.known_cached.assign(
          s.NumChunks(static_cast<int64_t>(fresh.tokens.size()), fresh.partial), false);
      it = s.requests.emplace(request.request_id, std::move(fresh)).first;
    }
    RequestState& state = it->second;
    if (request.kind == ScheduledKind::kRunning) {
      state.block_ids.insert(state.block_ids.end(), request.block_ids.begin(),
                             request.block_ids.end());
    } else {
      state.block_ids = request.block_ids;
    }
    if (!s.options.enable_save) continue;

    const int64_t prompt_len = static_cast<int64_t>(state.tokens.size());
    int64_t computed =
        std::min(request.num_computed_tokens + request.num_scheduled_tokens, prompt_len);
    if (request.save_limit_tokens >= 0) computed = std::min(computed, request.save_limit_tokens);
    int64_t end_chunk = computed / chunk;
    if (state.partial && computed == prompt_len && prompt_len % chunk != 0) {
      ++end_chunk;
    }
    int64_t begin_chunk = state.next_save_chunk;
    // Cached chunks need no save, unless the decoder will fetch them: saving one that is
    // present writes nothing and holds it.
    while (begin_chunk < end_chunk && state.known_cached[begin_chunk] && !state.send) {
      ++begin_chunk;
    }
    state.next_save_chunk = std::max(state.next_save_chunk, end_chunk);
    if (begin_chunk >= end_chunk) continue;
    const int64_t token_end = std::min(end_chunk * chunk, prompt_len);
    const int64_t blocks_needed = CeilDiv(token_end, s.options.block_size);
    if (static_cast<int64_t>(state.block_ids.size()) < blocks_needed) {
      Log().warn("strata connector: request {} has {} blocks for {} tokens; not saving it",
                 request.request_id, state.block_ids.size(), token_end);
      continue;
    }
    // A chunk that spans a null block lost part of its KV: save from the chunk after it.
    const int64_t live_block = s.FirstLiveBlock(state.block_ids, blocks_needed);
    begin_chunk = std::max(begin_chunk, CeilDiv(live_block * s.options.block_size, chunk));
    if (begin_chunk >= end_chunk) continue;
    TransferSpec spec;
    spec.request_id = request.request_id;
    spec.tokens.assign(state.tokens.begin(), state.tokens.begin() + token_end);
    spec.tenant_salt = state.tenant_salt;
    spec.lora_name = state.lora_name;
    spec.token_begin = begin_chunk * chunk;
    spec.token_end = token_end;
    spec.block_ids.assign(state.block_ids.begin(), state.block_ids.begin() + blocks_needed);
    if (state.send) spec.hold_ms = static_cast<uint32_t>(s.options.transfer_hold.count());
    spec.stream_to = state.decode_node;
    meta.saves.push_back(std::move(spec));
  }
  s.stats.saves_planned += meta.saves.size();
  return meta;
}

bool SchedulerConnector::RequestFinished(std::string_view request_id,
                                         std::span<const int32_t> /*block_ids*/) {
  absl::MutexLock lock(&impl_->mu);
  impl_->ForgetLocked(std::string(request_id));
  return false;
}

NodeAddress SchedulerConnector::DaemonNode() {
  internal::DaemonNode node = impl_->client->daemon_node();
  if (node.node_id.empty() && !impl_->client->connected()) {
    (void)impl_->client->Connect(impl_->options.lookup_budget);
    node = impl_->client->daemon_node();
  }
  return {.node_id = std::move(node.node_id), .remote_address = std::move(node.remote_address)};
}

SchedulerStats SchedulerConnector::Stats() const {
  SchedulerStats stats;
  {
    absl::MutexLock lock(&impl_->mu);
    stats = impl_->stats;
  }
  stats.connected = impl_->client->connected();
  stats.session = internal::ToSessionStats(impl_->client->stats());
  return stats;
}

}  // namespace strata::connector
