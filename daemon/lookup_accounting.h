// LookupAccounting counts the node's prefix lookups: how many, and how many of their tokens each
// tier held or none did, per source (the engines' lookups, which decide what prefill they skip,
// apart from control-API lookups by routers and operators) and per tenant. Control Stats, the CLI's
// `strata stats` and the strata_lookup* metrics read it; the node's token hit ratio is the
// engines'.
//
// A lookup's hit tokens go to the tier that answered for each chunk (the host tier when it holds
// the chunk, else the nearest lower tier that does: TieredStore::LocatePrefix), so a disk hit
// counts under the disk tier. Tenants are the requests' tenant strings ("" for none); at most
// kMaxNamedTenants per source are counted by name, later ones under kOtherTenants, so a flood of
// distinct salts cannot grow memory or metric series without bound.
//
// Thread-safety: every method is thread-safe (the session thread and gRPC threads record).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "storage/tiered/tier.h"

namespace strata::daemon {

enum class LookupSource { kEngine, kControl };
inline constexpr size_t kLookupSourceCount = 2;

// "engine", "control": the {source="..."} label of the lookup metrics.
std::string_view LookupSourceName(LookupSource source);

struct LookupTally {
  uint64_t lookups = 0;
  std::array<uint64_t, storage::kTierCount> hit_tokens{};  // by storage::Tier
  uint64_t miss_tokens = 0;                                // in no tier

  uint64_t hit_tokens_total() const;
  LookupTally& operator+=(const LookupTally& other);
};

// The hit tokens per tier of a lookup whose leading hit chunks are in `tiers` (chain order), hit
// chunk i holding tokens_of(i) tokens.
std::array<uint64_t, storage::kTierCount> HitTokensByTier(
    std::span<const storage::Tier> tiers, absl::FunctionRef<uint64_t(size_t)> tokens_of);

class LookupAccounting {
 public:
  static constexpr size_t kMaxNamedTenants = 64;
  static constexpr std::string_view kOtherTenants = "(other)";

  // One lookup of `tenant`: the hit tokens each tier answered for, and the tokens no tier held.
  void Record(LookupSource source, std::string_view tenant,
              const std::array<uint64_t, storage::kTierCount>& hit_tokens, uint64_t miss_tokens);

  // Every lookup of `source`.
  LookupTally Total(LookupSource source) const;
  // `source`'s lookups per tenant, by tenant name.
  std::vector<std::pair<std::string, LookupTally>> ByTenant(LookupSource source) const;

 private:
  mutable absl::Mutex mu_;
  std::array<absl::flat_hash_map<std::string, LookupTally>, kLookupSourceCount> tenants_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::daemon
