// The modelled time-to-first-token that Strata's Route ranks instances by.
//
// Dynamo's router scores an instance by its prefix overlap minus its load and ignores where the
// overlapping KV lies; a chunk on a slow tier can cost more to bring up than to recompute. This
// model prices each cached chunk by its tier. For a request of N prompt tokens on instance i,
// whose leading cached chunks j hold t_j tokens on tier tau_j:
//
//   chunk_j  = min(t_j * kv_bytes_per_token / bandwidth(tau_j),  t_j * prefill_s_per_token)
//              (a chunk that is slower to load than to recompute is recomputed)
//   load     = sum_j chunk_j
//   prefill  = (N - sum_j t_j) * prefill_s_per_token
//   queue    = queued_prefill_tokens_i * prefill_s_per_token
//   TTFT_i   = queue + load + prefill
//   score_i  = saved_i - load_i - queue_i, with saved_i = sum_j t_j * prefill_s_per_token,
//
// so the highest score is the lowest modelled TTFT (score = N * prefill_s_per_token - TTFT).
// Decode work already running on the instance is not modelled (its queued prefill tokens are).
//
// Defaults (TtftModelOptions): an 8B model (Llama-3.1-8B: 128 KiB of KV per token in bf16) on one
// H100 at ~50% of its 989 dense bf16 TFLOP/s: about 2 x 8e9 FLOP per token plus attention over
// a ~12K-token context (the production trace's mean prompt), ~19 GFLOP, so ~40 us per prompt
// token. Bandwidths into the engine: device 0 cost (the KV is already in GPU memory), host 25 GB/s
// (pinned DRAM to GPU over PCIe 5 at about half its peak), disk 1.4 GB/s (this machine's
// O_DIRECT read, BASELINES.md), remote 2 GB/s (UCX active messages over tcp, BASELINES.md).
// Every value is an option: a deployment sets what it measured.
//
// A plain value type and free functions; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "controller/index/chunk_event.h"

namespace strata::controller {

struct TtftModelOptions {
  double prefill_s_per_token = 40e-6;
  uint64_t kv_bytes_per_token = 128 * 1024;
  // Bytes per second from each tier into the engine, indexed by Tier; 0 for the device
  // tier means free (the KV is in place).
  std::array<double, kTierCount> tier_bytes_per_s = {0, 25e9, 1.4e9, 2e9};
};

// One cached chunk of the request's leading prefix on a candidate instance.
struct CachedChunk {
  uint32_t tokens = 0;
  Tier tier = Tier::kHost;
};

// A candidate instance for a request: its cached prefix (leading chunks, in order) and the
// prefill tokens it has queued.
struct RouteCandidate {
  std::vector<CachedChunk> cached_prefix;
  uint64_t queued_prefill_tokens = 0;
};

// The parts of a candidate's modelled TTFT, in seconds.
struct TtftEstimate {
  double queue_s = 0;
  double load_s = 0;     // bringing the cached chunks in (or recomputing the slow ones)
  double prefill_s = 0;  // computing the uncached tokens
  double saved_s = 0;    // prefill the cached chunks spare, before their load
  uint64_t cached_tokens = 0;
  uint64_t loaded_tokens = 0;  // of the cached ones, those faster to load than to recompute
  double ttft_s() const { return queue_s + load_s + prefill_s; }
  double score() const { return saved_s - load_s - queue_s; }
};

// The modelled TTFT of a request of `prompt_tokens` tokens on `candidate`. Cached tokens beyond
// the prompt are ignored.
TtftEstimate ModelTtft(const TtftModelOptions& options, uint64_t prompt_tokens,
                       const RouteCandidate& candidate);

// Candidate indices by modelled TTFT, lowest first (ties: the lower index first).
std::vector<size_t> RankByModelledTtft(const TtftModelOptions& options, uint64_t prompt_tokens,
                                       std::span<const RouteCandidate> candidates);

}  // namespace strata::controller
