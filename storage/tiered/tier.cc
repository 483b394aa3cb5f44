#include "storage/tiered/tier.h"

namespace strata::storage {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return "device";
    case Tier::kHost:
      return "host";
    case Tier::kDisk:
      return "disk";
    case Tier::kRemote:
      return "remote";
  }
  return "unknown";
}

}  // namespace strata::storage
