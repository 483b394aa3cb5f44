// SmallLayout builds the small MHA KvLayouts tests use, so that a test states only where its
// layout differs from the common one. Header-only; no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/kv_layout.h"

namespace strata::test_support {

// The fields tests vary; the rest keep KvLayout's defaults (MHA, RoPE applied, TP rank 0 of 1).
// The default shape is 2 layers x 2 KV heads x 16 dims in fp16 with 16-token chunks: 256 bytes
// per token, 4 KiB per full chunk (one 4 KiB page).
struct SmallLayoutShape {
  std::string_view model_id = "test-model";
  uint32_t num_layers = 2;
  uint32_t num_kv_heads = 2;
  uint32_t head_dim = 16;
  KvDtype dtype = KvDtype::kFloat16;
  uint32_t chunk_tokens = 16;
};

inline KvLayout SmallLayout(const SmallLayoutShape& shape = {}) {
  KvLayout layout;
  layout.model_id = std::string(shape.model_id);
  layout.num_layers = shape.num_layers;
  layout.num_kv_heads = shape.num_kv_heads;
  layout.head_dim = shape.head_dim;
  layout.dtype = shape.dtype;
  layout.chunk_tokens = shape.chunk_tokens;
  return layout;
}

}  // namespace strata::test_support
