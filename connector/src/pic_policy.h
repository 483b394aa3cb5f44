// PicPolicy: how a request recomputes around the position-independent chunks it reuses
// (ALGORITHMS.md section 3), chosen per request (PicRequests::Begin):
//   - kMepic (the default): block 1 of each shared chunk, into a request-private page; blocks
//     2..n are read in place (section 3c);
//   - kLegoLink: the leading pads and the first `legolink_tokens` real tokens of each shared
//     chunk (EPIC's LegoLink-k, section 3a, which counts real tokens);
//   - kLegoLinkZero: nothing of a shared chunk. Its KV is compiled after kLegoLinkDummies dummy
//     tokens (EPIC's LegoLink-0), so its key carries that compile variant and it never shares
//     pages with the chunks the other policies compile alone;
//   - kCacheBlend: every token through the layers before `check_layer`; there the `blend_ratio`
//     of the shared chunks' tokens whose fresh keys deviate most from their cached ones join the
//     recomputed tokens for the layers from there on (CacheBlend, section 3b; kernels/blend.h).
// Under every policy the prompt segments, and the chunks the request computes itself (written
// into the pool or private), are computed whole. Plain values; thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace strata::connector::internal {

enum class PicRecompute : uint8_t { kMepic, kLegoLink, kLegoLinkZero, kCacheBlend };

// Dummy tokens (copies of the pad token) LegoLink-0 compiles a chunk after, as EPIC's d = 3.
inline constexpr uint32_t kLegoLinkDummies = 3;

struct PicPolicy {
  PicRecompute recompute = PicRecompute::kMepic;
  uint32_t legolink_tokens = 16;  // kLegoLink: k > 0
  uint32_t check_layer = 1;       // kCacheBlend: < the model's layers
  double blend_ratio = 0.15;      // kCacheBlend: in [0, 1]

  // The compile variant of the request's chunk keys (KeyHasher::PicKey): the number of dummy
  // tokens a chunk's KV is prefilled after (kLegoLinkZero: kLegoLinkDummies; else 0).
  uint32_t compile_variant() const {
    return recompute == PicRecompute::kLegoLinkZero ? kLegoLinkDummies : 0;
  }
};

// kInvalidArgument naming the bad field for a model of `num_layers` layers.
absl::Status ValidatePicPolicy(const PicPolicy& policy, uint32_t num_layers);

}  // namespace strata::connector::internal
