// The EvictionPolicy contract, checked for every policy MakeEvictionPolicy builds (with and
// without tenant quotas) by a randomized model: victims are tracked and evictable, never
// protected; every evictable chunk is eventually a victim; size() counts what is tracked.
#include <map>
#include <random>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "storage/policy/eviction_policy.h"

namespace strata::storage {
namespace {

struct ContractCase {
  std::string policy;
  bool tenant_quotas = false;
};

class PolicyContractTest : public testing::TestWithParam<ContractCase> {
 protected:
  std::unique_ptr<EvictionPolicy> Make(uint64_t capacity) {
    PolicyOptions options{.capacity_bytes = capacity};
    if (GetParam().tenant_quotas) options.tenant_quotas = {{1, capacity / 4}, {2, capacity / 2}};
    absl::StatusOr<std::unique_ptr<EvictionPolicy>> policy =
        MakeEvictionPolicy(GetParam().policy, options);
    EXPECT_TRUE(policy.ok()) << policy.status();
    return *std::move(policy);
  }
};

TEST_P(PolicyContractTest, RandomOperationsKeepTheContract) {
  constexpr uint64_t kChunkBytes = 100;
  std::unique_ptr<EvictionPolicy> policy = Make(64 * kChunkBytes);
  std::mt19937_64 rng(42);
  std::map<ChunkId, bool> tracked;  // id -> evictable
  ChunkId next_id = 1;
  for (int step = 0; step < 200000; ++step) {
    const int op = static_cast<int>(rng() % 100);
    auto pick = [&]() -> ChunkId {
      if (tracked.empty()) return 0;
      auto it = tracked.lower_bound(rng() % next_id + 1);
      return it == tracked.end() ? tracked.begin()->first : it->first;
    };
    if (op < 35) {
      const ChunkId id = next_id++;
      const ChunkId parent = rng() % 2 == 0 ? pick() : kNoChunk;
      policy->OnInsert({.id = id,
                        .key_hash = rng() % 512,  // repeats: ghost hits happen
                        .size_bytes = kChunkBytes - (rng() % 3) * 20,
                        .parent = parent,
                        .partial = rng() % 8 == 0,
                        .tenant = static_cast<uint32_t>(rng() % 3)});
      tracked[id] = true;
    } else if (op < 60) {
      if (ChunkId id = pick(); id != 0) policy->OnAccess(id);
    } else if (op < 70) {
      if (ChunkId id = pick(); id != 0) {
        const bool evictable = rng() % 2 == 0;
        policy->SetEvictable(id, evictable);
        tracked[id] = evictable;
      }
    } else if (op < 75) {
      if (ChunkId id = pick(); id != 0) {
        policy->OnRemove(id);
        tracked.erase(id);
      }
    } else if (tracked.size() > 48) {
      const std::optional<ChunkId> victim = policy->PopVictim();
      const bool any_evictable =
          std::any_of(tracked.begin(), tracked.end(), [](const auto& e) { return e.second; });
      ASSERT_EQ(victim.has_value(), any_evictable) << "step " << step;
      if (victim.has_value()) {
        auto it = tracked.find(*victim);
        ASSERT_NE(it, tracked.end()) << "victim " << *victim << " is not tracked";
        ASSERT_TRUE(it->second) << "victim " << *victim << " is protected";
        tracked.erase(it);
      }
    }
    ASSERT_EQ(policy->size(), tracked.size()) << "step " << step;
  }
  // Drain: exactly the evictable chunks come out, each once.
  std::set<ChunkId> evictable;
  for (const auto& [id, is_evictable] : tracked) {
    if (is_evictable) evictable.insert(id);
  }
  std::set<ChunkId> drained;
  while (std::optional<ChunkId> victim = policy->PopVictim()) {
    ASSERT_TRUE(drained.insert(*victim).second);
  }
  EXPECT_EQ(drained, evictable);
  EXPECT_EQ(policy->size(), tracked.size() - evictable.size());
}

TEST_P(PolicyContractTest, UnknownIdsAndDuplicateInsertsAreHarmless) {
  std::unique_ptr<EvictionPolicy> policy = Make(1000);
  policy->OnInsert({.id = 1, .key_hash = 11, .size_bytes = 100});
  policy->OnInsert({.id = 1, .key_hash = 11, .size_bytes = 100});
  policy->OnRemove(99);
  policy->OnAccess(99);
  policy->SetEvictable(99, false);
  EXPECT_EQ(policy->size(), 1u);
  EXPECT_EQ(policy->PopVictim(), 1u);
  EXPECT_EQ(policy->PopVictim(), std::nullopt);
  EXPECT_EQ(policy->size(), 0u);
}

std::vector<ContractCase> AllCases() {
  std::vector<ContractCase> cases;
  for (std::string_view name : EvictionPolicyNames()) {
    cases.push_back({std::string(name), false});
    cases.push_back({std::string(name), true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyContractTest, testing::ValuesIn(AllCases()),
                         [](const testing::TestParamInfo<ContractCase>& info) {
                           std::string name = info.param.policy;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + (info.param.tenant_quotas ? "_quotas" : "");
                         });

TEST(MakeEvictionPolicy, RejectsBadOptions) {
  EXPECT_EQ(MakeEvictionPolicy("random", {.capacity_bytes = 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeEvictionPolicy("arc", {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MakeEvictionPolicy("lru", {.capacity_bytes = 10, .tenant_quotas = {{1, 0}}}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeEvictionPolicy("lru", {.capacity_bytes = 10, .tenant_quotas = {{1, 5}, {1, 6}}})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*MakeEvictionPolicy("lru", {.capacity_bytes = 10, .tenant_quotas = {{1, 5}}}))->name(),
            "lru+tenant-quotas");
  EXPECT_EQ(EvictionPolicyNames().front(), kDefaultEvictionPolicy);
}

}  // namespace
}  // namespace strata::storage
