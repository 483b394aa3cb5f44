#include "connector/src/pic_policy.h"

#include "fmt/format.h"

namespace strata::connector::internal {

absl::Status ValidatePicPolicy(const PicPolicy& policy, uint32_t num_layers) {
  switch (policy.recompute) {
    case PicRecompute::kMepic:
    case PicRecompute::kLegoLinkZero:
      return absl::OkStatus();
    case PicRecompute::kLegoLink:
      if (policy.legolink_tokens == 0) {
        return absl::InvalidArgumentError("LegoLink-k needs k (legolink_tokens) > 0");
      }
      return absl::OkStatus();
    case PicRecompute::kCacheBlend:
      if (policy.check_layer >= num_layers) {
        return absl::InvalidArgumentError(
            fmt::format("CacheBlend's check layer {} is not a layer of a {}-layer model",
                        policy.check_layer, num_layers));
      }
      if (!(policy.blend_ratio >= 0 && policy.blend_ratio <= 1)) {
        return absl::InvalidArgumentError(
            fmt::format("CacheBlend's ratio {} is outside [0, 1]", policy.blend_ratio));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown recompute policy");
}

}  // namespace strata::connector::internal
