// SimEngine is a simulated inference engine for integration tests and strata-bench: a paged KV
// cache in host memory (vLLM's FlashAttention layout, or separate K and V tensors), driven
// through the connector's scheduler and worker calls, one prefill step per prompt. The KV of
// every token it "computes" is f(token, position, layer, plane, head, dim); every token it loads
// is checked against f, so a wrong byte served by the cache is counted, never missed.
// Not thread-safe: one engine per process, like a real engine worker.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "strata/connector.h"

namespace strata::bench {

// A prompt is a concatenation of segments; segment (seed, length) holds tokens
// TokenAt(seed, 0..length-1), so prompts that agree on their first segments share a prefix.
struct PromptSegment {
  uint32_t seed = 0;
  uint32_t length = 0;
};
using Prompt = std::vector<PromptSegment>;

// "SEED:LEN[+SEED:LEN...]"; kInvalidArgument otherwise.
absl::StatusOr<Prompt> ParsePrompt(std::string_view spec);
std::vector<uint32_t> PromptTokens(const Prompt& prompt);

struct SimEngineOptions {
  std::string socket_path;
  std::string engine_id = "sim-engine";
  KvLayout layout;
  uint32_t block_size = 16;
  uint32_t num_blocks = 2048;
  bool separate_kv = false;
  // Simulated compute per layer, so tests can act mid-load.
  uint32_t layer_delay_us = 0;
  // Fill the prompt's KV before the step (outside the timed windows) instead of per layer
  // during it: the step then times the connector's work alone (benchmarks), and saves every
  // layer after the last layer's load, so the store is timed apart from the loads (with a layer
  // delay, each layer is saved after its delay instead, as a GPU saves what it computed).
  bool precompute = false;
  uint32_t lookup_budget_ms = 20;
  uint32_t io_timeout_ms = 5000;
  bool store_partial = false;
  // ConnectorOptions::async_loads: a hit the daemon must first bring up from its disk (or a
  // peer) loads between steps; the engine then runs empty steps until the worker reports it.
  bool async_loads = false;
  // Disaggregated prefill: kSend prefills for a decoder (the partial last chunk is saved too);
  // kReceive loads what node `source_node` prefilled (asynchronously).
  connector::KvTransfer kv_transfer = connector::KvTransfer::kNone;
  std::string source_node;
  // kSend: the decoder's daemon, to stream each saved layer to as the prefill computes it ("":
  // the decoder fetches the KV once the prefill is done).
  std::string decode_node;
  // Every request's tenant salt (vLLM's cache_salt): its chunks are the tenant's, apart from
  // other tenants' chunks of the same tokens, and their values differ from theirs (a chunk
  // served across tenants fails the check). Empty: no salt.
  std::string tenant_salt;
};

struct RequestResult {
  std::string request_id;
  uint64_t prompt_tokens = 0;
  uint64_t matched_tokens = 0;
  bool load_async = false;
  // kSend: the daemon's node id, which the decoder names as its source (remote_engine_id).
  std::string daemon_node;
  uint64_t failed_blocks = 0;
  uint64_t recomputed_tokens = 0;
  uint64_t wrong_values = 0;
  uint64_t lookup_us = 0;  // GetNumNewMatchedTokens (key hashing + one socket round trip)
  // StartLoadKv .. WaitForLayerLoad(last layer); for an asynchronous load, from the step that
  // sent it to the step whose GetFinished reported it.
  uint64_t load_us = 0;
  // Time inside SaveKvLayer and WaitForSave: the store path's copies and its commit (its
  // PrepareStore is in StartLoadKv, in load_us), never the engine's compute. With precompute
  // the save copies all run inside it; otherwise they may overlap the compute of later layers.
  uint64_t save_us = 0;
  uint64_t step_us = 0;  // the whole step after the lookup
  // Wall-clock time (microseconds since the Unix epoch) when the step's last layer was computed
  // (its layer delay included), for timing what other processes do after it (strata-bench pd).
  int64_t last_layer_unix_us = 0;
  // The same when WaitForSave returned: every layer's KV in the daemon's arena (the stream's tail
  // after it is the transfer's own, not the engine's saves catching up).
  int64_t saved_unix_us = 0;
  // RunBatch: from the batch's start (every request arrives then) to the end of the step that
  // computed the request's prompt, i.e. its first token. 0 for Run.
  uint64_t ttft_us = 0;
  uint64_t bytes_loaded = 0;
  uint64_t bytes_saved = 0;
  std::string load_status;
  std::string save_status;

  std::string ToJson() const;
};

class SimEngine {
 public:
  // Allocates the paged cache, creates the connectors and registers the cache. The daemon need
  // not be up (the connector reconnects by itself).
  static absl::StatusOr<std::unique_ptr<SimEngine>> Create(const SimEngineOptions& options);
  ~SimEngine();

  RequestResult Run(const Prompt& prompt);
  // The prompts arrive together and are served as one engine batch, as vLLM's scheduler would:
  // every request is looked up; each step computes every request whose KV is ready (host-tier
  // hits at once; asynchronous loads once the worker reports them), while asynchronous loads
  // proceed between steps. With async_loads off every load runs in the first step, which then
  // waits for the slowest (a disk promotion). Results in prompt order, with ttft_us. A batch
  // needs distinct blocks for every prompt (kResourceExhausted beyond num_blocks).
  absl::StatusOr<std::vector<RequestResult>> RunBatch(const std::vector<Prompt>& prompts);
  connector::WorkerStats worker_stats() const;
  connector::SchedulerStats scheduler_stats() const;

 private:
  struct Impl;
  explicit SimEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::bench
