// Model KV geometries shared by the benchmarks and the simulated engine (bench/engine/), so every
// figure sized "Llama-3-8B" means the same bytes (BASELINES.md: 128 KiB per token, 32 MiB per
// 256-token chunk). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/kv_layout.h"

namespace strata::bench {

// "small": 4 layers, 2 KV heads, head_dim 64, fp16 (2 KiB per token);
// "llama8b": 32 layers, 8 KV heads, head_dim 128 (128 KiB per token, bf16-sized).
// Model id "sim-model". kInvalidArgument for another geometry or an invalid chunk size.
absl::StatusOr<KvLayout> SimLayout(std::string_view geometry, uint32_t chunk_tokens);

// Llama-3-8B's KV geometry in chunks of 256 tokens (32 MiB): SimLayout("llama8b", 256).
KvLayout Llama8bLayout();

}  // namespace strata::bench
