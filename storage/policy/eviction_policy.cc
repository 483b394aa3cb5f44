#include "storage/policy/eviction_policy.h"

#include "fmt/format.h"
#include "storage/policy/lru_policy.h"

namespace strata::storage {

absl::StatusOr<std::unique_ptr<EvictionPolicy>> MakeEvictionPolicy(std::string_view name,
                                                                   const PolicyOptions& options) {
  (void)options;
  if (name == "lru") return std::make_unique<LruPolicy>();
  return absl::InvalidArgumentError(fmt::format("unknown eviction policy '{}'", name));
}

}  // namespace strata::storage
