#include "daemon/lookup_accounting.h"

#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

namespace strata::daemon {
namespace {

constexpr size_t kHost = static_cast<size_t>(storage::Tier::kHost);
constexpr size_t kDisk = static_cast<size_t>(storage::Tier::kDisk);

TEST(LookupAccountingTest, CountsPerSourceTenantAndTier) {
  LookupAccounting lookups;
  lookups.Record(LookupSource::kEngine, "b", {0, 64, 32, 0}, 16);
  lookups.Record(LookupSource::kEngine, "a", {0, 16, 0, 0}, 0);
  lookups.Record(LookupSource::kEngine, "b", {0, 0, 0, 0}, 100);
  lookups.Record(LookupSource::kControl, "", {0, 8, 0, 0}, 8);

  const LookupTally engines = lookups.Total(LookupSource::kEngine);
  EXPECT_EQ(engines.lookups, 3u);
  EXPECT_EQ(engines.hit_tokens[kHost], 80u);
  EXPECT_EQ(engines.hit_tokens[kDisk], 32u);
  EXPECT_EQ(engines.hit_tokens_total(), 112u);
  EXPECT_EQ(engines.miss_tokens, 116u);

  const auto tenants = lookups.ByTenant(LookupSource::kEngine);
  ASSERT_EQ(tenants.size(), 2u);
  EXPECT_EQ(tenants[0].first, "a");
  EXPECT_EQ(tenants[0].second.lookups, 1u);
  EXPECT_EQ(tenants[1].first, "b");
  EXPECT_EQ(tenants[1].second.lookups, 2u);
  EXPECT_EQ(tenants[1].second.miss_tokens, 116u);

  const LookupTally control = lookups.Total(LookupSource::kControl);
  EXPECT_EQ(control.lookups, 1u);
  EXPECT_EQ(control.hit_tokens_total(), 8u);
}

TEST(LookupAccountingTest, TenantsPastTheLimitCountAsOther) {
  LookupAccounting lookups;
  for (size_t i = 0; i < LookupAccounting::kMaxNamedTenants + 10; ++i) {
    lookups.Record(LookupSource::kEngine, fmt::format("tenant-{}", i), {0, 1, 0, 0}, 0);
  }
  lookups.Record(LookupSource::kEngine, "tenant-0", {0, 1, 0, 0}, 0);  // named: still its own
  const auto tenants = lookups.ByTenant(LookupSource::kEngine);
  ASSERT_EQ(tenants.size(), LookupAccounting::kMaxNamedTenants + 1);
  uint64_t other = 0, first = 0;
  for (const auto& [name, tally] : tenants) {
    if (name == LookupAccounting::kOtherTenants) other = tally.lookups;
    if (name == "tenant-0") first = tally.lookups;
  }
  EXPECT_EQ(other, 10u);
  EXPECT_EQ(first, 2u);
  EXPECT_EQ(lookups.Total(LookupSource::kEngine).lookups, LookupAccounting::kMaxNamedTenants + 11);
}

TEST(LookupAccountingTest, HitTokensByTierFollowTheChunksTiers) {
  const storage::Tier tiers[] = {storage::Tier::kDisk, storage::Tier::kHost, storage::Tier::kHost};
  const auto hit = HitTokensByTier(tiers, [](size_t i) -> uint64_t { return 10 * (i + 1); });
  EXPECT_EQ(hit[kDisk], 10u);
  EXPECT_EQ(hit[kHost], 50u);
}

TEST(LookupAccountingTest, RecordsFromManyThreadsAddUp) {
  LookupAccounting lookups;
  std::vector<std::jthread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&lookups, t] {
      for (int i = 0; i < 1000; ++i) {
        lookups.Record(t % 2 == 0 ? LookupSource::kEngine : LookupSource::kControl,
                       fmt::format("t{}", t), {0, 2, 0, 0}, 1);
      }
    });
  }
  threads.clear();
  EXPECT_EQ(lookups.Total(LookupSource::kEngine).lookups, 2000u);
  EXPECT_EQ(lookups.Total(LookupSource::kControl).hit_tokens_total(), 4000u);
}

}  // namespace
}  // namespace strata::daemon
