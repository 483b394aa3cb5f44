#include "storage/tiered/lower_tier.h"

#include "fmt/format.h"

namespace strata::storage {

absl::StatusOr<LowerTier::RecodeResult> LowerTier::Recode(const ChunkKey& /*key*/,
                                                          const Recoding& /*recoding*/) {
  return absl::FailedPreconditionError(
      fmt::format("the {} tier keeps no encoded chunks", TierName(tier())));
}

}  // namespace strata::storage
