#include "daemon/tier_proto.h"

namespace strata::daemon {

v1::Tier ToProto(storage::Tier tier) {
  switch (tier) {
    case storage::Tier::kDevice:
      return v1::TIER_DEVICE;
    case storage::Tier::kHost:
      return v1::TIER_HOST;
    case storage::Tier::kDisk:
      return v1::TIER_DISK;
    case storage::Tier::kRemote:
      return v1::TIER_REMOTE;
  }
  return v1::TIER_UNSPECIFIED;
}

std::optional<storage::Tier> StoreTier(v1::Tier tier) {
  switch (tier) {
    case v1::TIER_DEVICE:
      return storage::Tier::kDevice;
    case v1::TIER_HOST:
      return storage::Tier::kHost;
    case v1::TIER_DISK:
      return storage::Tier::kDisk;
    case v1::TIER_REMOTE:
      return storage::Tier::kRemote;
    default:
      return std::nullopt;
  }
}

}  // namespace strata::daemon
