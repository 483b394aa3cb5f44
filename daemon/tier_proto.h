// The control API's v1::Tier and the store's storage::Tier, each into the other. Pure functions.
#pragma once

#include <optional>

#include "proto/strata/v1/control.pb.h"
#include "storage/tiered/tier.h"

namespace strata::daemon {

v1::Tier ToProto(storage::Tier tier);
// The store's tier of `tier`; nullopt for TIER_UNSPECIFIED and unknown values.
std::optional<storage::Tier> StoreTier(v1::Tier tier);

}  // namespace strata::daemon
