#include "storage/device/device_runtime.h"

#include "fmt/format.h"

namespace strata::storage {

absl::Status DeviceStream::CheckDecodeLayerOps(std::span<const DecodeLayerOp> ops,
                                               std::string_view stream) {
  for (const DecodeLayerOp& op : ops) {
    if (op.codec == nullptr || op.layout == nullptr || op.frame == nullptr || op.out == nullptr ||
        op.failure == nullptr) {
      return absl::InvalidArgumentError(fmt::format("{}: decode with a null pointer", stream));
    }
    if (op.layer >= op.layout->num_layers || op.out_bytes == 0 ||
        op.out_bytes > op.layout->layer_bytes(op.layout->chunk_tokens)) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: decode of layer {} into {} bytes: the layout has {} layers of at most {} bytes",
          stream, op.layer, op.out_bytes, op.layout->num_layers,
          op.layout->layer_bytes(op.layout->chunk_tokens)));
    }
  }
  return absl::OkStatus();
}

}  // namespace strata::storage
