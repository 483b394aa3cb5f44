#include "bench/route/instance_cache.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace strata::bench {
namespace {

using controller::Tier;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(LruBlocksTest, EvictsTheLeastRecentlyTouched) {
  LruBlocks lru(2);
  EXPECT_EQ(lru.Touch(1), std::nullopt);
  EXPECT_EQ(lru.Touch(2), std::nullopt);
  EXPECT_EQ(lru.Touch(1), std::nullopt) << "refreshed";
  EXPECT_EQ(lru.Touch(3), 2u);
  EXPECT_TRUE(lru.Contains(1));
  EXPECT_FALSE(lru.Contains(2));
  EXPECT_EQ(LruBlocks(0).Touch(7), 7u) << "no room: evicted at once";
}

TEST(InstanceCacheTest, HostEvictionsGoToDiskAndPrefixesStopAtTheFirstMiss) {
  InstanceCache cache(/*host_blocks=*/2, /*disk_blocks=*/2);
  const std::vector<uint64_t> chain = {10, 11, 12, 13};
  EXPECT_THAT(cache.CachedPrefix(chain), IsEmpty());
  cache.Store(chain);  // 10 and 11 demoted to disk; 12 and 13 in the host tier
  EXPECT_THAT(cache.CachedPrefix(chain),
              ElementsAre(Tier::kDisk, Tier::kDisk, Tier::kHost, Tier::kHost));
  cache.Store(std::vector<uint64_t>{20, 21});  // 12, 13 to disk; 10, 11 dropped
  EXPECT_THAT(cache.CachedPrefix(chain), IsEmpty()) << "block 10 is gone";
  EXPECT_THAT(cache.CachedPrefix(std::vector<uint64_t>{12, 13, 20}),
              ElementsAre(Tier::kDisk, Tier::kDisk, Tier::kHost));
}

}  // namespace
}  // namespace strata::bench
