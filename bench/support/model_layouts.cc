#include "bench/support/model_layouts.h"

#include "fmt/format.h"

namespace strata::bench {

absl::StatusOr<KvLayout> SimLayout(std::string_view geometry, uint32_t chunk_tokens) {
  KvLayout layout;
  layout.model_id = "sim-model";
  layout.dtype = KvDtype::kFloat16;
  layout.chunk_tokens = chunk_tokens;
  if (geometry == "llama8b") {
    layout.num_layers = 32;
    layout.num_kv_heads = 8;
    layout.head_dim = 128;
  } else if (geometry == "small") {
    layout.num_layers = 4;
    layout.num_kv_heads = 2;
    layout.head_dim = 64;
  } else {
    return absl::InvalidArgumentError(
        fmt::format("unknown geometry '{}' (small or llama8b)", geometry));
  }
  if (absl::Status s = layout.Validate(); !s.ok()) return s;
  return layout;
}

KvLayout Llama8bLayout() { return *SimLayout("llama8b", 256); }

}  // namespace strata::bench
