// Test and benchmark support for the codecs: synthetic chunk payloads (their errors are measured
// by storage/codec/kv_error.h).
// Test-only code (library strata_codec_testing); pure functions, thread-safe.
//
// Payloads are layer-major chunks of `layout` (core/kv_layout.h) holding `num_tokens` tokens, each
// value drawn in fp32 and rounded once to the layout's dtype (fp16, bf16 or fp32):
//   kGaussian  every element N(0, 1), independent.
//   kShaped    KV shaped as KIVI and CacheGen describe real models':
//              keys (plane 0; an MLA latent too) K[l,t,h,d] = s[l,h,d] * (z + o[l,h,d]): outlier
//              channels, each channel independently with probability 1/16, have s = 12, the others
//              s = 1; o ~ N(0, 1) is a per-channel offset fixed across tokens; z ~ N(0, 1).
//              values (plane 1) V[l,t,h,d] = r[l,t] * z: a per-token scale r = exp(N(0, 0.75^2))
//              shared by every head and channel of the token; z ~ N(0, 1).
//   kLowRank   KV with the structure xKV reports of pre-RoPE KV: each plane's token vectors lie
//              near a subspace of 64 dimensions whose token factors neighbouring layers share.
//              For each plane p, X[l,t,:] = sum_{j<64} a_p^j (f[t,j] + 0.15 n[l,t,j]) b[l,j,:]
//              + 0.01 e: f, n, e ~ N(0, 1), f shared by every layer, n each layer's own; a_p =
//              0.85 for keys, 0.9 for values (values need a higher rank, as xKV's README ranks
//              say); b[l,j,c] ~ N(0, 1) / 8, times 12 on the outlier channels of kShaped's keys.
//              A model, not a measurement: real KV is what --kv-file in codec_bench is for.
// The same (layout, num_tokens, kind, seed) gives the same bytes on every run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/kv_layout.h"

namespace strata::storage::testing {

enum class KvShape { kGaussian, kShaped, kLowRank };

std::vector<std::byte> MakeKv(const KvLayout& layout, uint32_t num_tokens, KvShape shape,
                              uint64_t seed);

}  // namespace strata::storage::testing
