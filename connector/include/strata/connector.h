// The Strata connector: the library an inference engine links to use the local Strata daemon as
// its KV cache (DESIGN.md sections 5 and 6). Its surface follows vLLM's KVConnectorBase_V1, so
// the Python shim (connector/python/strata_vllm) is a thin binding:
//
//   scheduler process / thread            worker process (one per GPU / TP rank)
//   SchedulerConnector                    WorkerConnector
//     GetNumNewMatchedTokens                RegisterKvCaches            (once)
//     UpdateStateAfterAlloc                 StartLoadKv(metadata)       (each step, before forward)
//     BuildConnectorMeta  --metadata-->     WaitForLayerLoad(layer)     (before layer's attention)
//     RequestFinished                       SaveKvLayer(layer)          (after layer's attention)
//                                           WaitForSave                 (end of forward)
//                                           GetFinished, GetBlockIdsWithLoadErrors
//
// The connector never takes the engine down: a lookup the daemon does not answer within
// lookup_budget reports 0 hits; while the daemon is gone lookups report 0 hits at once, loads
// fail (their blocks come back from GetBlockIdsWithLoadErrors and the engine recomputes them) and
// saves are skipped; the connector reconnects by itself when the daemon returns. Loads fail
// closed: a chunk whose lease, copy, checksum (optional) or release is not clean is reported as
// failed, together with every later chunk of the same request, never served.
//
// Keys: both sides compute chunk keys with core/KeyHasher over the prompt's tokens, each with
// its own KvLayout. The scheduler looks up with the layout in its options (give it TP rank 0's);
// each worker loads and saves with its own rank's layout, so a chunk that another rank lacks is
// a failed load on that rank (recomputed), never wrong KV.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/clock.h"
#include "core/key_hasher.h"
#include "core/kv_layout.h"
#include "storage/device/device_runtime.h"
#include "storage/device/device_runtime_factory.h"

namespace strata::connector {

struct ConnectorOptions {
  // The daemon's engine socket.
  std::string socket_path;
  // Free-form name of this engine process (the daemon's logs and metrics).
  std::string engine_id = "engine";
  // What this process's chunks hold (see "Keys" above for which rank's layout the scheduler uses).
  KvLayout layout;
  // Hash algorithm and seed of chunk keys; every engine sharing a cache must agree on them.
  KeyHasherOptions hashing;
  // The engine's tokens per KV block (vLLM cache_config.block_size).
  uint32_t block_size = 16;

  // A lookup (reconnect included) that takes longer reports 0 hits.
  std::chrono::milliseconds lookup_budget{20};
  // Deadline of each worker round trip (PrepareLoad, PrepareStore, Commit, Release). Generous:
  // the daemon checksums every chunk it leases or commits (a 32K-token Llama-8B prompt is 4 GiB),
  // and a timeout only guards against a hung daemon; lookups have their own tight budget.
  std::chrono::milliseconds io_timeout{5000};
  std::chrono::milliseconds reconnect_min_backoff{100};
  std::chrono::milliseconds reconnect_max_backoff{1000};
  // Lease asked for each loaded chunk; 0: the daemon's default.
  uint32_t lease_ms = 0;

  bool enable_load = true;  // false: GetNumNewMatchedTokens always reports 0 (a KV producer)
  bool enable_save = true;  // false: nothing is stored (a KV consumer)
  // Also store (and look up) the last, partial chunk of a prompt. Off by default: partial chunks
  // are rarely shared and cost a key and a store each.
  bool store_partial_chunks = false;
  // The engine's blocks are opaque pages (vLLM's CPU attention keeps K column-major or
  // AMX-prepacked inside a block): a chunk's bytes are its blocks' bytes, so only whole chunks
  // are stored and loaded (never a partial last one, store_partial_chunks and disaggregated
  // prefill included), and chunk_tokens must be a multiple of block_size, so that every copy
  // covers whole blocks.
  bool whole_blocks_only = false;
  // Who checks a loaded chunk's checksum (xxh3-64 of its payload, taken when it was stored); a
  // chunk that fails becomes failed blocks, recomputed by the engine. true: this connector checks
  // every chunk it loads, in the same pass over memory as the copy when the device runtime
  // digests copies (the host runtime), else in a CPU pass over the arena once the copies are
  // done (CUDA), and the daemon leases without checking first. false: the daemon checks on lease
  // as its [host] verify_every_n_loads says (every load by default).
  bool verify_checksums = true;

  // Chunks the daemon holds compressed (Compress, [host] codec). true: this worker decodes them
  // on its device runtime as it loads them, layer by layer on its load stream, for every codec
  // the runtime decodes (DeviceRuntime::DecodesOnDevice: the host runtime, every codec; CUDA,
  // int8 and the kivi codecs once they pass its start-up check): the frame is what crosses to
  // the device, and the daemon keeps the chunk compressed. The frame's checksum is always checked
  // (whatever verify_checksums says: a GPU's decode cannot check the frame's sections), and a
  // frame that fails it or does not decode fails its blocks (recomputed). false, or a codec the
  // runtime does not decode: the daemon decodes the chunk back in place before it places it.
  bool decode_on_device = true;

  // Loads that would wait for a lower tier run between steps instead of inside one. true: a hit
  // whose chunks are not all in the daemon's host tier (some are on its disk, or on a peer) is
  // offered as an asynchronous load (MatchResult::load_async): the worker leases and copies it
  // in the background while the engine runs other requests, and reports the request through
  // GetFinished once its blocks hold the KV. Host-tier hits stay synchronous and layer-pipelined.
  // false: every load runs inside the step that schedules it (for an engine that does not handle
  // load_async).
  bool async_loads = false;

  // A block id that names no block: vLLM's null block (id 0), which stands for a block a
  // sliding-window KV-cache group has freed because it fell out of the window. A chunk that
  // spans such a block is never saved (its KV is gone), and a load copies nothing into one (the
  // engine never reads it). -1: every block id is a real block (the C API's engines, SGLang).
  int32_t null_block_id = -1;

  // How long the daemon keeps the chunks of a prompt prefilled for another engine's decode
  // (KvTransfer::kSend) in its memory at least, so that the decoder's daemon finds them there
  // (a soft pin that expires: nothing leaks when the decoder never comes).
  std::chrono::milliseconds transfer_hold{30'000};
  // The lookup budget of a request whose KV another engine prefilled (KvTransfer::kReceive): its
  // daemon asks the prefiller's for up to its [remote] pd_lookup_budget_ms (200 by default), so
  // this must be longer.
  std::chrono::milliseconds transfer_lookup_budget{1000};

  // Worker only: how bytes move (storage/device/device_runtime_factory.h).
  storage::DeviceBackend device_backend = storage::DeviceBackend::kAuto;
  int device_ordinal = 0;

  // Time source of the reconnect backoff; not owned; must outlive the connector.
  const Clock* clock = SystemClock::Get();

  // kInvalidArgument naming the first unusable field.
  absl::Status Validate() const;
};

// ---- Scheduler side ------------------------------------------------------------------------

// A request's part in a disaggregated prefill ("PD": one engine prefills, another decodes;
// vLLM's kv_transfer_params).
enum class KvTransfer {
  kNone,
  // do_remote_decode: this engine prefills a request that another engine decodes. The prompt's
  // partial last chunk is saved too: the decoder loads every token but the last.
  kSend,
  // do_remote_prefill: the engine on node `source_node` prefilled it. The lookup covers the
  // partial last chunk and names that node (a node the daemon has not admitted as a peer gives
  // 0 tokens: the engine recomputes), and the load is asynchronous (with async_loads).
  kReceive,
};

// A request as GetNumNewMatchedTokens sees it. Views; copied as needed.
struct RequestInfo {
  std::string_view request_id;
  std::span<const uint32_t> prompt_tokens;
  std::string_view tenant_salt;  // vLLM: request.cache_salt; empty for none
  std::string_view lora_name;    // vLLM: request.lora_request.lora_name; empty for the base model
  KvTransfer kv_transfer = KvTransfer::kNone;
  std::string_view source_node;  // kReceive: the node id of the prefiller's daemon
  // kSend: the node id of the decoder's daemon, when the prefill request names it (Strata's
  // extension of the params: decode_engine_id). The prefiller's daemon then streams each layer
  // of the prompt's chunks there as soon as it is saved, so the transfer overlaps the prefill.
  // Empty: the decoder fetches the KV once the prefill is done.
  std::string_view decode_node;
};

// Where the daemon's peers reach it (its [remote] node id and listen address); empty when it has
// no remote tier. A prefiller hands these to the decoder (vLLM's remote_engine_id, remote_host,
// remote_port).
struct NodeAddress {
  std::string node_id;
  std::string remote_address;  // host:port
};

struct MatchResult {
  // Tokens beyond num_computed_tokens that the engine may load from the cache (see
  // SchedulerConnector::GetNumNewMatchedTokens for the exact rule).
  int64_t num_tokens = 0;
  // The load runs between steps (ConnectorOptions::async_loads and a hit that is not all in the
  // daemon's host tier): the engine allocates the blocks, keeps the request waiting, and
  // schedules it once a worker's GetFinished reports it in finished_recving. false: the load
  // runs inside the forward pass, layer by layer (StartLoadKv / WaitForLayerLoad).
  bool load_async = false;
};

enum class ScheduledKind {
  kNew,      // first scheduled: block_ids are all of its blocks
  kRunning,  // scheduled again: block_ids are the blocks added this step (maybe none)
  kResumed,  // resumed after preemption: block_ids are all of its (new) blocks
};

// One request of a scheduler step (vLLM SchedulerOutput.scheduled_new_reqs /
// scheduled_cached_reqs and num_scheduled_tokens).
struct ScheduledRequest {
  std::string request_id;
  ScheduledKind kind = ScheduledKind::kNew;
  // Tokens with KV before this step (local prefix-cache hits and loaded tokens included).
  int64_t num_computed_tokens = 0;
  // Tokens computed in this step.
  int64_t num_scheduled_tokens = 0;
  std::vector<int32_t> block_ids;
  // Only needed for a request the connector has not seen in GetNumNewMatchedTokens.
  std::vector<uint32_t> prompt_tokens;
  std::string tenant_salt;
  std::string lora_name;
  // Positions at and beyond this are not saved this step, though computed: their KV is not all
  // there yet (vLLM's num_publishable_block_hashes fence: with EAGLE prefix-cache hashing, the
  // draft model's KV of the last positions comes a step later). They are saved in the step that
  // lifts the fence. -1: no fence.
  int64_t save_limit_tokens = -1;
};

struct SchedulerStep {
  std::vector<ScheduledRequest> requests;
  // Requests that finished since the last step (vLLM SchedulerOutput.finished_req_ids).
  std::vector<std::string> finished_request_ids;
};

// ---- Metadata: scheduler -> workers, once per step ----------------------------------------

// One request's load or save in a step: engine positions [token_begin, token_end) move between
// the cache's chunks and the engine's blocks. Chunk i of the request holds prompt positions
// [i*C, min((i+1)*C, tokens.size())) where C is chunk_tokens; its key is the chain over `tokens`.
struct TransferSpec {
  std::string request_id;
  // Prompt tokens from position 0 to the end of the last chunk the transfer touches.
  std::vector<uint32_t> tokens;
  std::string tenant_salt;
  std::string lora_name;
  int64_t token_begin = 0;
  int64_t token_end = 0;
  // The request's blocks from position 0: position p is slot p % block_size of block
  // block_ids[p / block_size]. Covers at least [0, token_end).
  std::vector<int32_t> block_ids;
  // Loads only: the scheduler could not plan this load (an engine bug, e.g. a load nobody
  // promised); the worker reports every block of [token_begin, token_end) as failed.
  bool fail = false;
  // Saves only: how long the daemon keeps the saved chunks in memory at least (a prefill for
  // another engine's decode: ConnectorOptions::transfer_hold); 0: no hold.
  uint32_t hold_ms = 0;
  // Saves only: the node id of a peer daemon to stream the saved chunks to, layer by layer
  // (RequestInfo::decode_node); empty: none.
  std::string stream_to;
  // Loads only: an asynchronous load (MatchResult::load_async). The worker runs it in the
  // background and reports the request in FinishedRequests::finished_recving when it is over,
  // with its failed blocks (if any) in the GetBlockIdsWithLoadErrors call that follows.
  bool async = false;

  friend bool operator==(const TransferSpec&, const TransferSpec&) = default;
};

// What the workers do in one step. A plain value; Serialize / Deserialize carry it between
// processes (vLLM pickles it from the scheduler to the workers).
struct ConnectorMetadata {
  uint32_t block_size = 0;
  uint32_t chunk_tokens = 0;
  std::vector<TransferSpec> loads;
  std::vector<TransferSpec> saves;
  std::vector<std::string> finished_request_ids;

  std::string Serialize() const;
  // kInvalidArgument for a truncated, corrupt or other-version encoding.
  static absl::StatusOr<ConnectorMetadata> Deserialize(std::string_view bytes);

  friend bool operator==(const ConnectorMetadata&, const ConnectorMetadata&) = default;
};

// A front end's sessions with the daemon (each role has its own; a worker with asynchronous
// loads has two, summed).
struct SessionStats {
  uint64_t connects = 0;      // handshakes that succeeded (the first one included)
  uint64_t disconnects = 0;   // sessions dropped: a dead or broken daemon, never a late reply
  uint64_t timeouts = 0;      // calls that ran past their deadline (their session stays)
  uint64_t late_replies = 0;  // replies that came after their call gave up, discarded
};

struct SchedulerStats {
  uint64_t lookups = 0;              // lookup round trips sent
  uint64_t lookup_failures = 0;      // lookups that reported 0 hits for want of an answer
  uint64_t lookup_hit_tokens = 0;    // sum of MatchResult::num_tokens
  uint64_t async_loads_offered = 0;  // lookups that answered with load_async
  uint64_t unknown_sources = 0;      // kReceive lookups whose source node the daemon did not know
  uint64_t prefetches = 0;           // Prefetch round trips sent
  uint64_t prefetch_failures = 0;    // of those, unanswered or refused (queue full, ...)
  uint64_t prefetch_chunks = 0;      // chunks the daemon queued for promotion
  uint64_t loads_planned = 0;
  uint64_t saves_planned = 0;
  SessionStats session;
  bool connected = false;
};

// The scheduler side. Thread-safe (an internal mutex; a lookup's round trip runs without it).
// vLLM calls it from its scheduler thread. Owns its daemon session (no arena mapping).
class SchedulerConnector {
 public:
  // kInvalidArgument for unusable options. Does not need the daemon to be up.
  static absl::StatusOr<std::unique_ptr<SchedulerConnector>> Create(
      const ConnectorOptions& options);
  ~SchedulerConnector();

  // How many tokens beyond `num_computed_tokens` the engine can load from the cache, using one
  // lookup round trip bounded by lookup_budget. The rule:
  //   hit    = tokens covered by the leading run of cached chunks of the prompt (whole chunks;
  //            the partial last chunk counts only with store_partial_chunks). Chunks wholly
  //            inside num_computed_tokens are not looked up: the engine has them.
  //   usable = min(hit, prompt_len - 1)     (the engine must compute at least one token)
  //   result = max(0, usable - num_computed_tokens)
  // so a load may start and end inside a chunk (it starts at num_computed_tokens, which the
  // engine aligns to its blocks, and a full-prompt hit stops one token short of the end).
  // 0 when loads are disabled, the prompt is shorter than a chunk, the daemon is unreachable or
  // it does not answer within the budget. May be called several times for a request; the last
  // call counts. Records the request (its tokens, extras and hits) for the calls below.
  MatchResult GetNumNewMatchedTokens(const RequestInfo& request, int64_t num_computed_tokens);

  // A request was queued (it waits for KV blocks or its turn): asks the daemon to bring the
  // chunks of its prompt that it holds only on disk into its host tier in the background, so
  // that the later GetNumNewMatchedTokens / load find them in memory instead of reading the
  // disk then. One round trip bounded by lookup_budget; the daemon answers before any disk
  // I/O. Returns how many chunks the daemon queued: 0 when loads are disabled, the prompt is
  // shorter than a chunk, nothing needed promotion, the daemon has no disk tier, its queue is
  // full, or it is unreachable (errors are counted in SchedulerStats, never raised: a prefetch
  // is a hint). Does not record the request.
  uint32_t Prefetch(const RequestInfo& request);

  // The engine allocated `block_ids` (all of the request's blocks from position 0) and will load
  // `num_external_tokens` (0: load nothing) tokens from position num_computed_tokens of the last
  // GetNumNewMatchedTokens. The load goes into the next BuildConnectorMeta. kInvalidArgument /
  // kFailedPrecondition for a load that does not match what GetNumNewMatchedTokens offered or
  // blocks that do not cover it; the load is then planned as failed (TransferSpec::fail), so
  // the engine recomputes instead of reading unloaded blocks.
  absl::Status UpdateStateAfterAlloc(std::string_view request_id,
                                     std::span<const int32_t> block_ids,
                                     int64_t num_external_tokens);

  // Makes the load that the last GetNumNewMatchedTokens offered for `request_id` asynchronous,
  // though its chunks are all in the host tier. A hybrid engine (several KV-cache groups, one
  // connector each) loads a request's groups together: when one group's hit must come up from a
  // lower tier, every group's load runs between steps, so that every group's worker reports the
  // request through GetFinished. Call it before UpdateStateAfterAlloc. kFailedPrecondition
  // without async_loads; kNotFound for a request no lookup recorded.
  absl::Status MakeLoadAsync(std::string_view request_id);

  // The metadata of one step: the loads planned since the last call, and saves of the prompt's
  // chunks that this step completes (a chunk is saved once every one of its tokens has KV by the
  // end of the step; only prompt tokens are saved; chunks the lookup found cached are skipped).
  // Forgets finished requests.
  ConnectorMetadata BuildConnectorMeta(const SchedulerStep& step);

  // The request finished; its state is dropped. Returns whether its blocks must stay allocated
  // until the workers finish saving them: always false, because saves complete inside the step
  // that scheduled them (WaitForSave), before the engine can finish or free the request. A
  // request that waits for an asynchronous load keeps its blocks by the engine's own rule (vLLM
  // frees them once a worker reports it in finished_recving); a load planned for it but not yet
  // sent goes out failed, so that the workers still report it.
  bool RequestFinished(std::string_view request_id, std::span<const int32_t> block_ids);

  // The daemon's node among its peers, for a prefiller to name to its decoders. Connects first
  // (bounded by lookup_budget) when no session has told it yet; empty when the daemon has no
  // remote tier or cannot be reached.
  NodeAddress DaemonNode();

  SchedulerStats Stats() const;

 private:
  struct Impl;
  explicit SchedulerConnector(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---- Worker side ---------------------------------------------------------------------------

// A strided tensor as the engine holds it: the address of element 0, its shape and its strides
// in elements (torch: data_ptr(), shape, stride()). The element type is the layout's dtype.
struct KvTensor {
  void* data = nullptr;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
};

// One attention layer's paged KV, in one of these forms (head_dim innermost, stride 1):
//   - vLLM FlashAttention: `kv` is [2, num_blocks, block_size, kv_heads, head_dim] (K and V
//     stacked on dim 0; any stride order, e.g. the HND permutation) and `v` is empty;
//   - separate K and V: `kv` is K [num_blocks, block_size, kv_heads, head_dim], `v` is V;
//   - MLA latent: `kv` is [num_blocks, block_size, head_dim] or [num_blocks, block_size, 1,
//     head_dim], `v` empty.
struct LayerKvCache {
  KvTensor kv;
  std::optional<KvTensor> v;
};

struct StepOptions {
  // The engine's compute stream (CUDA: torch.cuda.current_stream().cuda_stream). Loads start
  // after, and saves copy after, the work already enqueued on it. Unset: no ordering with an
  // engine stream (CPU engines, or engines that synchronize themselves).
  std::optional<storage::ExternalStream> engine_stream;
};

struct FinishedRequests {
  // Requests whose saves were asynchronous and are now done (always empty: saves complete in
  // WaitForSave).
  std::vector<std::string> finished_sending;
  // Requests whose asynchronous loads are over, loaded or failed (every such request is
  // reported exactly once, also when it finished or was aborted meanwhile: the engine frees its
  // blocks only then). Their failed blocks come from the GetBlockIdsWithLoadErrors call that
  // follows this GetFinished.
  std::vector<std::string> finished_recving;
  // Of finished_recving, the requests at least one of whose chunks failed to load (an engine
  // that cannot map failed blocks back to requests, e.g. vLLM with several KV-cache groups,
  // recomputes these).
  std::vector<std::string> failed_recving;
};

struct WorkerStats {
  uint64_t chunks_loaded = 0;
  uint64_t chunks_failed = 0;
  uint64_t bytes_loaded = 0;
  uint64_t chunks_saved = 0;  // committed
  uint64_t chunks_already_present = 0;
  uint64_t chunks_save_failed = 0;    // reserved but aborted or not committed
  uint64_t chunks_corrupt = 0;        // loaded, but their bytes did not match their checksum or
                                      // (compressed) did not decode
  uint64_t chunks_decoded = 0;        // of chunks_loaded, compressed ones this worker decoded
  uint64_t encoded_bytes_loaded = 0;  // the frames of those
  uint64_t bytes_saved = 0;
  uint64_t async_requests_loaded = 0;  // asynchronous loads over (failed ones included)
  uint64_t async_requests_in_flight = 0;
  // Bytes of the session's arena mapped into this process ahead of the copies (by a thread that
  // maps the pages the daemon has allocated).
  uint64_t arena_prefaulted_bytes = 0;
  SessionStats session;
  bool connected = false;
};

// The worker side, one per engine worker (GPU / TP rank). Not thread-safe: vLLM calls every
// method from the worker's model-runner thread. Owns its daemon session, the arena mapping and
// the DeviceRuntime (its copy streams run on their own threads or CUDA streams). The engine's
// caches (RegisterKvCaches) must stay valid until the connector is destroyed: an asynchronous
// load may copy into them until then. The destructor waits for the asynchronous load in flight
// (its daemon round trips are bounded by io_timeout) and drops those not started.
//
// A step: StartLoadKv(metadata) -> WaitForLayerLoad(i) / SaveKvLayer(i) for each layer i ->
// WaitForSave() -> GetBlockIdsWithLoadErrors(). Methods that report kInvalidArgument or
// kFailedPrecondition reject engine misuse (no registered caches, a layer out of range); any
// load they leave undone is reported as failed, never silently skipped.
class WorkerConnector {
 public:
  // `runtime` null: chosen by the factory from options.device_backend. kInvalidArgument for
  // unusable options; the factory's error for an unavailable backend.
  static absl::StatusOr<std::unique_ptr<WorkerConnector>> Create(
      const ConnectorOptions& options, std::unique_ptr<storage::DeviceRuntime> runtime = nullptr);
  ~WorkerConnector();

  // Describes the engine's paged KV (one entry per layer, layer order). Validates every shape,
  // stride and dtype against the layout (kInvalidArgument naming the layer and field), then
  // tries once to connect (a failure is not an error: the connector retries later).
  // Re-registering replaces the previous caches (between steps only).
  absl::Status RegisterKvCaches(std::span<const LayerKvCache> layers);

  // Starts this step's loads: leases the chunks, then enqueues every layer's copies (arena ->
  // engine), layer 0 first, so layer i+1 copies while the engine consumes layer i. Also
  // reserves space for this step's saves. Returns once everything is enqueued.
  absl::Status StartLoadKv(const ConnectorMetadata& metadata, const StepOptions& step = {});
  // Blocks until layer `layer` of this step's loads is in the engine's blocks. After the last
  // layer, releases the leases (an expired lease fails its chunk). OK when nothing loads.
  absl::Status WaitForLayerLoad(uint32_t layer);
  // Enqueues the copies of layer `layer` of this step's saves (engine -> arena), ordered after
  // the engine stream's work when one was given.
  absl::Status SaveKvLayer(uint32_t layer, const StepOptions& step = {});
  // Copies the layers SaveKvLayer was not called for (ordered after the engine stream last
  // given to StartLoadKv or SaveKvLayer), waits for every save copy, then commits (or aborts, on
  // any failure) the reservations. Also finishes this step's loads if the engine did not wait for
  // every layer. On return the engine may reuse every block of the step.
  absl::Status WaitForSave();

  // The asynchronous loads that are over since the last call (see FinishedRequests). Does not
  // wait. `finished_request_ids`: requests the engine finished; nothing to do for them (an
  // asynchronous load always runs to its end and is reported).
  FinishedRequests GetFinished(std::span<const std::string> finished_request_ids);
  // Blocks whose load failed since the last call (sorted, unique); the engine recomputes them.
  // Includes the failed blocks of every asynchronous load that GetFinished has reported.
  std::vector<int32_t> GetBlockIdsWithLoadErrors();

  WorkerStats Stats() const;
  const storage::DeviceRuntime& runtime() const;

 private:
  struct Impl;
  explicit WorkerConnector(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::connector
