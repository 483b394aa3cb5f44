#include "bench/engine/sim_engine.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <numeric>
#include <random>
#include <thread>

#include "core/clock.h"
#include "core/fmt_absl.h"
#include "fmt/format.h"

namespace strata::bench {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t Micros(Clock::duration duration) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(duration).count());
}

uint32_t TokenAt(uint32_t seed, uint32_t position) {
  uint64_t x = (uint64_t{seed} << 32 | position) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return static_cast<uint32_t>(x % 128000);
}

// Names a tenant in the KV values (FNV-1a of its salt; 0 for none): the same tokens hold other
// values for another tenant, so a chunk served across tenants fails the engine's check.
uint64_t TenantSeed(std::string_view salt) {
  uint64_t x = 0;
  if (salt.empty()) return x;
  x = 0xcbf29ce484222325ull;
  for (char c : salt) x = (x ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return x;
}

// The KV value of one element of `tenant`'s KV as a 16-bit pattern (fp16-sized elements).
uint16_t KvValue(uint64_t tenant, uint32_t token, uint32_t position, uint32_t layer, uint32_t plane,
                 uint32_t head, uint32_t dim) {
  uint64_t x = token ^ tenant;
  for (uint64_t v :
       {uint64_t{position}, uint64_t{layer}, uint64_t{plane}, uint64_t{head}, uint64_t{dim}}) {
    x = (x ^ v) * 0xff51afd7ed558ccdull;
    x ^= x >> 33;
  }
  return static_cast<uint16_t>(x);
}

}  // namespace

absl::StatusOr<Prompt> ParsePrompt(std::string_view spec) {
  Prompt prompt;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t plus = spec.find('+', start);
    const std::string_view part =
        spec.substr(start, plus == std::string_view::npos ? std::string_view::npos : plus - start);
    const size_t colon = part.find(':');
    PromptSegment segment;
    const bool ok =
        colon != std::string_view::npos &&
        std::from_chars(part.data(), part.data() + colon, segment.seed).ptr ==
            part.data() + colon &&
        std::from_chars(part.data() + colon + 1, part.data() + part.size(), segment.length).ptr ==
            part.data() + part.size() &&
        segment.length > 0;
    if (!ok) {
      return absl::InvalidArgumentError(
          fmt::format("bad prompt '{}' (want SEED:LEN[+SEED:LEN...])", spec));
    }
    prompt.push_back(segment);
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
  return prompt;
}

std::vector<uint32_t> PromptTokens(const Prompt& prompt) {
  std::vector<uint32_t> tokens;
  for (const PromptSegment& segment : prompt) {
    for (uint32_t i = 0; i < segment.length; ++i) tokens.push_back(TokenAt(segment.seed, i));
  }
  return tokens;
}

std::string RequestResult::ToJson() const {
  return fmt::format(
      "{{\"request\":\"{}\",\"prompt_tokens\":{},\"matched_tokens\":{},\"load_async\":{},"
      "\"daemon_node\":\"{}\","
      "\"failed_blocks\":{},"
      "\"recomputed_tokens\":{},\"wrong_values\":{},\"lookup_us\":{},\"load_us\":{},"
      "\"save_us\":{},\"step_us\":{},\"ttft_us\":{},\"bytes_loaded\":{},\"bytes_saved\":{},"
      "\"last_layer_unix_us\":{},\"saved_unix_us\":{},\"load_status\":\"{}\","
      "\"save_status\":\"{}\"}}",
      request_id, prompt_tokens, matched_tokens, load_async, daemon_node, failed_blocks,
      recomputed_tokens, wrong_values, lookup_us, load_us, save_us, step_us, ttft_us, bytes_loaded,
      bytes_saved, last_layer_unix_us, saved_unix_us, load_status, save_status);
}

struct SimEngine::Impl {
  SimEngineOptions options;
  uint64_t tenant = 0;  // TenantSeed(options.tenant_salt)
  // Per layer: [2][num_blocks][block_size][kv_heads][head_dim] of 16-bit values (K then V).
  std::vector<std::vector<uint16_t>> cache;
  std::unique_ptr<connector::SchedulerConnector> scheduler;
  std::unique_ptr<connector::WorkerConnector> worker;
  std::vector<int32_t> block_order;  // a permutation of every block id
  std::mt19937 rng{12345};
  uint64_t next_request = 0;

  size_t Index(uint32_t plane, uint32_t block, uint32_t slot, uint32_t head, uint32_t dim) const {
    const KvLayout& l = options.layout;
    const size_t per_plane =
        size_t{options.num_blocks} * options.block_size * l.num_kv_heads * l.head_dim;
    return plane * per_plane +
           ((size_t{block} * options.block_size + slot) * l.num_kv_heads + head) * l.head_dim + dim;
  }

  // An asynchronous load of `request_id`: empty steps (nothing scheduled, as while vLLM's
  // request waits for its KV) until the worker reports it, within twice the io timeout.
  // Returns its failed blocks; every block of [0, matched) when it was never reported.
  std::vector<int32_t> WaitForAsyncLoad(const std::string& request_id,
                                        const std::vector<int32_t>& blocks, uint32_t matched) {
    std::vector<int32_t> failed;
    const auto deadline = Clock::now() + 2 * std::chrono::milliseconds(options.io_timeout_ms);
    while (Clock::now() < deadline) {
      (void)worker->StartLoadKv(scheduler->BuildConnectorMeta({}));
      (void)worker->WaitForSave();
      const connector::FinishedRequests done = worker->GetFinished({});
      const std::vector<int32_t> errors = worker->GetBlockIdsWithLoadErrors();
      failed.insert(failed.end(), errors.begin(), errors.end());
      if (std::find(done.finished_recving.begin(), done.finished_recving.end(), request_id) !=
          done.finished_recving.end()) {
        return failed;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return {blocks.begin(),
            blocks.begin() + (matched + options.block_size - 1) / options.block_size};
  }

  void Compute(uint32_t layer, const std::vector<uint32_t>& tokens,
               const std::vector<int32_t>& blocks, uint32_t begin, uint32_t end) {
    const KvLayout& l = options.layout;
    for (uint32_t p = begin; p < end; ++p) {
      const uint32_t block = static_cast<uint32_t>(blocks[p / options.block_size]);
      const uint32_t slot = p % options.block_size;
      for (uint32_t plane = 0; plane < 2; ++plane) {
        for (uint32_t h = 0; h < l.num_kv_heads; ++h) {
          for (uint32_t d = 0; d < l.head_dim; ++d) {
            cache[layer][Index(plane, block, slot, h, d)] =
                KvValue(tenant, tokens[p], p, layer, plane, h, d);
          }
        }
      }
    }
  }

  // Elements of positions [0, end) that differ from f, skipping blocks in `failed`.
  uint64_t Verify(const std::vector<uint32_t>& tokens, const std::vector<int32_t>& blocks,
                  uint32_t end, const std::vector<int32_t>& failed) const {
    const KvLayout& l = options.layout;
    uint64_t wrong = 0;
    for (uint32_t p = 0; p < end; ++p) {
      const int32_t block = blocks[p / options.block_size];
      if (std::binary_search(failed.begin(), failed.end(), block)) continue;
      const uint32_t slot = p % options.block_size;
      for (uint32_t layer = 0; layer < l.num_layers; ++layer) {
        for (uint32_t plane = 0; plane < 2; ++plane) {
          for (uint32_t h = 0; h < l.num_kv_heads; ++h) {
            for (uint32_t d = 0; d < l.head_dim; ++d) {
              wrong += cache[layer][Index(plane, static_cast<uint32_t>(block), slot, h, d)] !=
                       KvValue(tenant, tokens[p], p, layer, plane, h, d);
            }
          }
        }
      }
    }
    return wrong;
  }
};

SimEngine::SimEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SimEngine::~SimEngine() = default;

absl::StatusOr<std::unique_ptr<SimEngine>> SimEngine::Create(const SimEngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->tenant = TenantSeed(options.tenant_salt);
  const KvLayout& l = options.layout;
  if (DtypeSizeBytes(l.dtype) != 2) {
    return absl::InvalidArgumentError("sim engine layouts use 16-bit elements");
  }
  const size_t layer_elements =
      size_t{2} * options.num_blocks * options.block_size * l.num_kv_heads * l.head_dim;
  impl->cache.assign(l.num_layers, std::vector<uint16_t>(layer_elements));
  impl->block_order.resize(options.num_blocks);
  std::iota(impl->block_order.begin(), impl->block_order.end(), 0);

  connector::ConnectorOptions connector_options;
  connector_options.socket_path = options.socket_path;
  connector_options.engine_id = options.engine_id;
  connector_options.layout = l;
  connector_options.block_size = options.block_size;
  connector_options.lookup_budget = std::chrono::milliseconds(options.lookup_budget_ms);
  connector_options.io_timeout = std::chrono::milliseconds(options.io_timeout_ms);
  connector_options.store_partial_chunks = options.store_partial;
  connector_options.async_loads =
      options.async_loads || options.kv_transfer == connector::KvTransfer::kReceive;
  connector_options.device_backend = storage::DeviceBackend::kHost;
  absl::StatusOr<std::unique_ptr<connector::SchedulerConnector>> scheduler =
      connector::SchedulerConnector::Create(connector_options);
  if (!scheduler.ok()) return scheduler.status();
  impl->scheduler = std::move(*scheduler);
  absl::StatusOr<std::unique_ptr<connector::WorkerConnector>> worker =
      connector::WorkerConnector::Create(connector_options);
  if (!worker.ok()) return worker.status();
  impl->worker = std::move(*worker);

  const int64_t heads = l.num_kv_heads, dim = l.head_dim;
  const int64_t blocks = options.num_blocks, bs = options.block_size;
  const std::vector<int64_t> block_strides = {bs * heads * dim, heads * dim, dim, 1};
  std::vector<connector::LayerKvCache> layers;
  for (std::vector<uint16_t>& layer : impl->cache) {
    if (options.separate_kv) {
      const int64_t half = blocks * bs * heads * dim;
      layers.push_back(
          {.kv = {layer.data(), {blocks, bs, heads, dim}, block_strides},
           .v = connector::KvTensor{layer.data() + half, {blocks, bs, heads, dim}, block_strides}});
    } else {
      layers.push_back(
          {.kv = {layer.data(),
                  {2, blocks, bs, heads, dim},
                  {blocks * bs * heads * dim, bs * heads * dim, heads * dim, dim, 1}}});
    }
  }
  if (absl::Status s = impl->worker->RegisterKvCaches(layers); !s.ok()) return s;
  return std::unique_ptr<SimEngine>(new SimEngine(std::move(impl)));
}

RequestResult SimEngine::Run(const Prompt& prompt) {
  Impl& e = *impl_;
  const SimEngineOptions& o = e.options;
  RequestResult result;
  result.request_id = fmt::format("{}-req-{}", o.engine_id, e.next_request++);
  const std::vector<uint32_t> tokens = PromptTokens(prompt);
  const uint32_t length = static_cast<uint32_t>(tokens.size());
  result.prompt_tokens = length;

  const uint32_t num_blocks = (length + o.block_size - 1) / o.block_size;
  if (num_blocks > o.num_blocks) {
    result.load_status = result.save_status =
        fmt::format("prompt needs {} blocks; the engine has {}", num_blocks, o.num_blocks);
    return result;
  }
  // Distinct blocks in a scattered order, as a busy engine's allocator hands them out.
  std::shuffle(e.block_order.begin(), e.block_order.end(), e.rng);
  const std::vector<int32_t> blocks(e.block_order.begin(), e.block_order.begin() + num_blocks);
  for (std::vector<uint16_t>& layer : e.cache) {
    std::fill(layer.begin(), layer.end(), uint16_t{0xdead});
  }

  const connector::WorkerStats before = e.worker->Stats();
  const auto start = Clock::now();
  const connector::MatchResult match =
      e.scheduler->GetNumNewMatchedTokens({.request_id = result.request_id,
                                           .prompt_tokens = tokens,
                                           .tenant_salt = o.tenant_salt,
                                           .kv_transfer = o.kv_transfer,
                                           .source_node = o.source_node,
                                           .decode_node = o.decode_node},
                                          0);
  const auto looked_up = Clock::now();
  const uint32_t matched = static_cast<uint32_t>(match.num_tokens);
  result.matched_tokens = matched;
  result.load_async = match.load_async;
  if (o.precompute) {
    for (uint32_t layer = 0; layer < o.layout.num_layers; ++layer) {
      e.Compute(layer, tokens, blocks, matched, length);
    }
  }

  const auto step_start = Clock::now();
  (void)e.scheduler->UpdateStateAfterAlloc(result.request_id, blocks, match.num_tokens);
  std::vector<int32_t> failed;  // blocks whose load failed
  Clock::time_point loaded = step_start;
  if (match.load_async) {
    failed = e.WaitForAsyncLoad(result.request_id, blocks, matched);
    loaded = Clock::now();
  }
  connector::SchedulerStep step;
  step.requests.push_back({.request_id = result.request_id,
                           .kind = connector::ScheduledKind::kNew,
                           .num_computed_tokens = match.num_tokens,
                           .num_scheduled_tokens = length - match.num_tokens,
                           .block_ids = blocks});
  const connector::ConnectorMetadata metadata = e.scheduler->BuildConnectorMeta(step);
  const absl::Status started = e.worker->StartLoadKv(metadata);
  Clock::duration saving{0};  // inside SaveKvLayer and WaitForSave
  const auto save_layer = [&](uint32_t layer) {
    const auto save_start = Clock::now();
    (void)e.worker->SaveKvLayer(layer);
    saving += Clock::now() - save_start;
  };
  for (uint32_t layer = 0; layer < o.layout.num_layers; ++layer) {
    (void)e.worker->WaitForLayerLoad(layer);
    if (layer + 1 == o.layout.num_layers && !match.load_async) loaded = Clock::now();
    if (o.layer_delay_us > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(o.layer_delay_us));
      // A paced engine stands for a GPU computing the layer now: it saves the layer as it goes,
      // its KV precomputed or not.
      if (o.precompute) save_layer(layer);
    }
    if (layer + 1 == o.layout.num_layers) result.last_layer_unix_us = UnixMicros();
    if (!o.precompute) {
      e.Compute(layer, tokens, blocks, matched, length);
      save_layer(layer);
    }
  }
  // Precomputed KV is ready in every layer: unpaced, the saves follow the last load instead of
  // interleaving with the loads, so nothing but the store path runs in their window.
  if (o.precompute) {
    for (uint32_t layer = 0; layer < o.layout.num_layers; ++layer) save_layer(layer);
  }
  const auto wait_start = Clock::now();
  const absl::Status saved = e.worker->WaitForSave();
  const auto step_end = Clock::now();
  result.saved_unix_us = UnixMicros();
  saving += step_end - wait_start;
  const std::vector<int32_t> step_failed = e.worker->GetBlockIdsWithLoadErrors();
  failed.insert(failed.end(), step_failed.begin(), step_failed.end());
  std::sort(failed.begin(), failed.end());
  failed.erase(std::unique(failed.begin(), failed.end()), failed.end());
  result.wrong_values = e.Verify(tokens, blocks, matched, failed);
  for (uint32_t p = 0; p < matched; ++p) {  // recompute what failed to load
    if (!std::binary_search(failed.begin(), failed.end(), blocks[p / o.block_size])) continue;
    for (uint32_t layer = 0; layer < o.layout.num_layers; ++layer) {
      e.Compute(layer, tokens, blocks, p, p + 1);
    }
    ++result.recomputed_tokens;
  }
  e.scheduler->BuildConnectorMeta({.finished_request_ids = {result.request_id}});
  e.scheduler->RequestFinished(result.request_id, blocks);
  if (o.kv_transfer == connector::KvTransfer::kSend) {
    result.daemon_node = e.scheduler->DaemonNode().node_id;
  }

  const connector::WorkerStats after = e.worker->Stats();
  result.failed_blocks = failed.size();
  result.lookup_us = Micros(looked_up - start);
  result.load_us = Micros(loaded - step_start);
  result.save_us = Micros(saving);
  result.step_us = Micros(step_end - step_start);
  result.bytes_loaded = after.bytes_loaded - before.bytes_loaded;
  result.bytes_saved = after.bytes_saved - before.bytes_saved;
  result.load_status = started.ok() ? "OK" : std::string(started.message());
  result.save_status = saved.ok() ? "OK" : std::string(saved.message());
  return result;
}

absl::StatusOr<std::vector<RequestResult>> SimEngine::RunBatch(const std::vector<Prompt>& prompts) {
  Impl& e = *impl_;
  const SimEngineOptions& o = e.options;
  struct Request {
    RequestResult result;
    std::vector<uint32_t> tokens;
    std::vector<int32_t> blocks;
    uint32_t computed = 0;  // tokens with KV once its load is over
    bool ready = false;     // its KV is loaded (or it loads inside the step that computes it)
    bool done = false;
  };
  std::vector<Request> batch(prompts.size());
  std::shuffle(e.block_order.begin(), e.block_order.end(), e.rng);
  size_t next_block = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Request& r = batch[i];
    r.tokens = PromptTokens(prompts[i]);
    const size_t num_blocks = (r.tokens.size() + o.block_size - 1) / o.block_size;
    if (next_block + num_blocks > o.num_blocks) {
      return absl::ResourceExhaustedError(
          fmt::format("the batch needs more than the engine's {} blocks", o.num_blocks));
    }
    r.blocks.assign(e.block_order.begin() + next_block,
                    e.block_order.begin() + next_block + num_blocks);
    next_block += num_blocks;
    r.result.request_id = fmt::format("{}-req-{}", o.engine_id, e.next_request++);
    r.result.prompt_tokens = r.tokens.size();
  }
  for (std::vector<uint16_t>& layer : e.cache) std::fill(layer.begin(), layer.end(), 0xdead);

  const auto start = Clock::now();
  for (Request& r : batch) {
    const auto t0 = Clock::now();
    const connector::MatchResult match =
        e.scheduler->GetNumNewMatchedTokens({.request_id = r.result.request_id,
                                             .prompt_tokens = r.tokens,
                                             .tenant_salt = o.tenant_salt},
                                            0);
    r.result.lookup_us = Micros(Clock::now() - t0);
    r.result.matched_tokens = match.num_tokens;
    r.result.load_async = match.load_async;
    r.computed = static_cast<uint32_t>(match.num_tokens);
    r.ready = !match.load_async;
    (void)e.scheduler->UpdateStateAfterAlloc(r.result.request_id, r.blocks, match.num_tokens);
  }
  std::vector<int32_t> failed;  // every failed block of the batch, sorted
  const auto deadline =
      start + 2 * std::chrono::milliseconds(o.io_timeout_ms) + std::chrono::seconds(10);
  while (std::any_of(batch.begin(), batch.end(), [](const Request& r) { return !r.done; })) {
    if (Clock::now() > deadline) return absl::DeadlineExceededError("the batch never finished");
    connector::SchedulerStep step;
    std::vector<Request*> scheduled;
    for (Request& r : batch) {
      if (!r.ready || r.done) continue;
      scheduled.push_back(&r);
      step.requests.push_back(
          {.request_id = r.result.request_id,
           .kind = connector::ScheduledKind::kNew,
           .num_computed_tokens = r.computed,
           .num_scheduled_tokens = static_cast<int64_t>(r.result.prompt_tokens - r.computed),
           .block_ids = r.blocks});
    }
    (void)e.worker->StartLoadKv(e.scheduler->BuildConnectorMeta(step));
    for (uint32_t layer = 0; layer < o.layout.num_layers; ++layer) {
      (void)e.worker->WaitForLayerLoad(layer);
      if (o.layer_delay_us > 0 && !scheduled.empty()) {
        std::this_thread::sleep_for(std::chrono::microseconds(o.layer_delay_us));
      }
      for (Request* r : scheduled) {
        e.Compute(layer, r->tokens, r->blocks, r->computed,
                  static_cast<uint32_t>(r->tokens.size()));
      }
      (void)e.worker->SaveKvLayer(layer);
    }
    (void)e.worker->WaitForSave();
    const connector::FinishedRequests over = e.worker->GetFinished({});
    const std::vector<int32_t> errors = e.worker->GetBlockIdsWithLoadErrors();
    failed.insert(failed.end(), errors.begin(), errors.end());
    std::sort(failed.begin(), failed.end());
    const auto now = Clock::now();
    for (Request* r : scheduled) {
      r->done = true;
      r->result.ttft_us = Micros(now - start);
    }
    for (const std::string& id : over.finished_recving) {
      for (Request& r : batch) {
        if (r.result.request_id != id) continue;
        r.ready = true;
        // Computed up to its first failed block, as vLLM truncates an asynchronous load.
        for (uint32_t p = 0; p < r.computed; p += o.block_size) {
          if (std::binary_search(failed.begin(), failed.end(), r.blocks[p / o.block_size])) {
            r.computed = p;
            break;
          }
        }
      }
    }
    if (scheduled.empty() && over.finished_recving.empty()) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  std::vector<RequestResult> results;
  for (Request& r : batch) {
    const uint32_t matched = static_cast<uint32_t>(r.result.matched_tokens);
    r.result.wrong_values = e.Verify(r.tokens, r.blocks, matched, failed);
    r.result.failed_blocks = std::count_if(r.blocks.begin(), r.blocks.end(), [&](int32_t b) {
      return std::binary_search(failed.begin(), failed.end(), b);
    });
    r.result.load_status = r.result.save_status = "OK";
    e.scheduler->BuildConnectorMeta({.finished_request_ids = {r.result.request_id}});
    e.scheduler->RequestFinished(r.result.request_id, r.blocks);
    results.push_back(std::move(r.result));
  }
  return results;
}

connector::WorkerStats SimEngine::worker_stats() const { return impl_->worker->Stats(); }

connector::SchedulerStats SimEngine::scheduler_stats() const { return impl_->scheduler->Stats(); }

}  // namespace strata::bench
