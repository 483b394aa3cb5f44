#include "storage/tiered/tier.h"

namespace strata::storage {

std::string_view TierName(Tier tier) {
  switch (tier) {
    case Tier::kHost:
      return "host";
    case Tier::kDisk:
      return "disk";
  }
  return "unknown";
}

}  // namespace strata::storage
