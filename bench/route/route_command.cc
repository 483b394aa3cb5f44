#include "bench/route/route_command.h"

#include <algorithm>
#include <iostream>
#include <queue>
#include <vector>

#include "bench/route/instance_cache.h"
#include "bench/support/model_layouts.h"
#include "bench/trace/trace.h"
#include "controller/routing/ttft_model.h"
#include "core/byte_size.h"
#include "core/fmt_absl.h"
#include "fmt/format.h"

namespace strata::bench {
namespace {

using controller::RouteCandidate;
using controller::TtftEstimate;
using controller::TtftModelOptions;

enum class Router { kNoCache, kRoundRobin, kLongestPrefix, kStrataRoute };

const char* RouterName(Router router) {
  switch (router) {
    case Router::kNoCache:
      return "no_cache";
    case Router::kRoundRobin:
      return "round_robin";
    case Router::kLongestPrefix:
      return "longest_prefix";
    case Router::kStrataRoute:
      return "strata_route";
  }
  return "?";
}

struct SimConfig {
  uint32_t instances = 0;
  uint64_t host_blocks = 0;
  uint64_t disk_blocks = 0;
  double load_scale = 1;
  TtftModelOptions model;
};

struct RouterResult {
  Router router = Router::kNoCache;
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  uint64_t loaded_tokens = 0;
  double mean_ttft_s = 0;
  double p90_ttft_s = 0;
  double imbalance = 0;
};

// Tokens of each trace block of `request`: 512, the last one fewer when partial.
std::vector<uint32_t> BlockTokens(const TraceRequest& request) {
  std::vector<uint32_t> tokens(request.blocks.size(), kTraceBlockTokens);
  if (!tokens.empty() && request.last_block_partial()) {
    tokens.back() = request.input_tokens % kTraceBlockTokens;
  }
  return tokens;
}

// Dynamo's choice: the fewest blocks to prefill (uncached, whatever tier the overlap lies in)
// plus blocks queued; ties to the lower index.
size_t LongestPrefixChoice(std::span<const RouteCandidate> candidates, size_t request_blocks) {
  size_t best = 0;
  uint64_t best_cost = UINT64_MAX;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const uint64_t queued_blocks =
        (candidates[i].queued_prefill_tokens + kTraceBlockTokens - 1) / kTraceBlockTokens;
    const uint64_t cost = request_blocks - candidates[i].cached_prefix.size() + queued_blocks;
    if (cost < best_cost) best = i, best_cost = cost;
  }
  return best;
}

RouterResult Simulate(const Trace& trace, Router router, const SimConfig& config) {
  const size_t n = config.instances;
  std::vector<InstanceCache> caches(n, InstanceCache(config.host_blocks, config.disk_blocks));
  std::vector<double> busy_until(n, 0);
  std::vector<uint64_t> queued_tokens(n, 0);  // uncached prompt tokens of unfinished requests
  std::vector<double> queued_sum(n, 0);       // queued_tokens summed over arrivals
  struct Completion {
    double finish_s;
    size_t instance;
    size_t request;
    uint64_t queued;
    bool operator>(const Completion& o) const { return finish_s > o.finish_s; }
  };
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> running;
  RouterResult result{.router = router};
  std::vector<double> ttfts;
  ttfts.reserve(trace.requests.size());
  std::vector<RouteCandidate> candidates(n);

  for (size_t r = 0; r < trace.requests.size(); ++r) {
    const TraceRequest& request = trace.requests[r];
    const double now = static_cast<double>(request.timestamp_ms) / 1000.0 / config.load_scale;
    while (!running.empty() && running.top().finish_s <= now) {
      const Completion done = running.top();
      running.pop();
      if (router != Router::kNoCache)
        caches[done.instance].Store(trace.requests[done.request].blocks);
      queued_tokens[done.instance] -= done.queued;
    }
    const std::vector<uint32_t> block_tokens = BlockTokens(request);
    for (size_t i = 0; i < n; ++i) {
      queued_sum[i] += static_cast<double>(queued_tokens[i]);
      candidates[i].queued_prefill_tokens = queued_tokens[i];
      candidates[i].cached_prefix.clear();
      if (router == Router::kNoCache) continue;
      const std::vector<controller::Tier> tiers = caches[i].CachedPrefix(request.blocks);
      for (size_t b = 0; b < tiers.size(); ++b) {
        candidates[i].cached_prefix.push_back({.tokens = block_tokens[b], .tier = tiers[b]});
      }
    }
    size_t chosen = 0;
    switch (router) {
      case Router::kNoCache:
      case Router::kRoundRobin:
        chosen = r % n;
        break;
      case Router::kLongestPrefix:
        chosen = LongestPrefixChoice(candidates, request.blocks.size());
        break;
      case Router::kStrataRoute:
        chosen = controller::RankByModelledTtft(config.model, request.input_tokens, candidates)[0];
        break;
    }
    const TtftEstimate estimate =
        controller::ModelTtft(config.model, request.input_tokens, candidates[chosen]);
    const double start = std::max(now, busy_until[chosen]);
    const double finish = start + estimate.load_s + estimate.prefill_s;
    busy_until[chosen] = finish;
    const uint64_t uncached = request.input_tokens - estimate.cached_tokens;
    queued_tokens[chosen] += uncached;
    running.push({finish, chosen, r, uncached});
    ttfts.push_back(finish - now);
    result.prompt_tokens += request.input_tokens;
    result.cached_tokens += estimate.cached_tokens;
    result.loaded_tokens += estimate.loaded_tokens;
  }
  if (!ttfts.empty()) {
    double sum = 0;
    for (double t : ttfts) sum += t;
    result.mean_ttft_s = sum / static_cast<double>(ttfts.size());
    std::vector<double> sorted = ttfts;
    const size_t p90 = std::min(sorted.size() - 1, sorted.size() * 9 / 10);
    std::nth_element(sorted.begin(), sorted.begin() + p90, sorted.end());
    result.p90_ttft_s = sorted[p90];
  }
  double mean = 0, max = 0;
  for (double q : queued_sum) mean += q / static_cast<double>(n), max = std::max(max, q);
  result.imbalance = mean > 0 ? max / mean : 1;
  return result;
}

}  // namespace

int RunRouteCommand(const RouteCommandOptions& o) {
  absl::StatusOr<Trace> trace = LoadTrace(o.trace_file);
  absl::StatusOr<KvLayout> layout = SimLayout(o.geometry, kTraceBlockTokens);
  absl::StatusOr<uint64_t> host_bytes = ParseByteSize(o.host_capacity);
  absl::StatusOr<uint64_t> disk_bytes = ParseByteSize(o.disk_capacity);
  for (const absl::Status& status :
       {trace.status(), layout.status(), host_bytes.status(), disk_bytes.status()}) {
    if (!status.ok()) {
      std::cerr << "strata-bench route: " << status << "\n";
      return 1;
    }
  }
  if (o.instances == 0 || o.load_scale <= 0 || o.prefill_us_per_token <= 0 || o.host_gbps <= 0 ||
      o.disk_gbps <= 0) {
    std::cerr << "strata-bench route: instances, load scale, prefill cost and bandwidths must "
                 "be positive\n";
    return 1;
  }
  std::stable_sort(
      trace->requests.begin(), trace->requests.end(),
      [](const TraceRequest& a, const TraceRequest& b) { return a.timestamp_ms < b.timestamp_ms; });
  SimConfig config{.instances = o.instances, .load_scale = o.load_scale};
  const uint64_t block_bytes = layout->chunk_bytes(kTraceBlockTokens);
  config.host_blocks = *host_bytes / block_bytes;
  config.disk_blocks = *disk_bytes / block_bytes;
  config.model.prefill_s_per_token = o.prefill_us_per_token * 1e-6;
  config.model.kv_bytes_per_token = layout->bytes_per_token();
  config.model.tier_bytes_per_s[static_cast<size_t>(controller::Tier::kHost)] = o.host_gbps * 1e9;
  config.model.tier_bytes_per_s[static_cast<size_t>(controller::Tier::kDisk)] = o.disk_gbps * 1e9;

  std::vector<RouterResult> results;
  for (Router router :
       {Router::kNoCache, Router::kRoundRobin, Router::kLongestPrefix, Router::kStrataRoute}) {
    results.push_back(Simulate(*trace, router, config));
  }
  std::cout << fmt::format(
      "{{\"bench\": \"route\", \"modelled\": true, \"requests\": {}, \"instances\": {}, "
      "\"load_scale\": {}, \"host_blocks_per_instance\": {}, \"disk_blocks_per_instance\": {}, "
      "\"block_tokens\": {}, \"prefill_us_per_token\": {}, \"kv_bytes_per_token\": {}, "
      "\"host_gbps\": {}, \"disk_gbps\": {}, \"routers\": [",
      trace->requests.size(), o.instances, o.load_scale, config.host_blocks, config.disk_blocks,
      kTraceBlockTokens, o.prefill_us_per_token, config.model.kv_bytes_per_token, o.host_gbps,
      o.disk_gbps);
  std::cerr << fmt::format("{:<16} {:>9} {:>9} {:>12} {:>12} {:>10}\n", "router", "hit", "loaded",
                           "mean TTFT s", "p90 TTFT s", "imbalance");
  for (size_t i = 0; i < results.size(); ++i) {
    const RouterResult& r = results[i];
    const double hit = static_cast<double>(r.cached_tokens) / static_cast<double>(r.prompt_tokens);
    const double loaded =
        static_cast<double>(r.loaded_tokens) / static_cast<double>(r.prompt_tokens);
    std::cout << fmt::format(
        "{}{{\"router\": \"{}\", \"hit_ratio\": {:.4f}, \"loaded_ratio\": {:.4f}, "
        "\"mean_ttft_s\": {:.4f}, \"p90_ttft_s\": {:.4f}, \"imbalance\": {:.3f}}}",
        i == 0 ? "" : ", ", RouterName(r.router), hit, loaded, r.mean_ttft_s, r.p90_ttft_s,
        r.imbalance);
    std::cerr << fmt::format("{:<16} {:>9.4f} {:>9.4f} {:>12.4f} {:>12.4f} {:>10.3f}\n",
                             RouterName(r.router), hit, loaded, r.mean_ttft_s, r.p90_ttft_s,
                             r.imbalance);
  }
  std::cout << "]}\n";
  return 0;
}

}  // namespace strata::bench
