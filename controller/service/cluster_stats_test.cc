#include "controller/service/cluster_stats.h"

#include "gtest/gtest.h"

namespace strata::controller {
namespace {

v1::TierStats Tier(v1::Tier tier, uint64_t chunks, uint64_t used_bytes, uint64_t hits) {
  v1::TierStats stats;
  stats.set_tier(tier);
  stats.set_chunks(chunks);
  stats.set_used_bytes(used_bytes);
  stats.set_hits(hits);
  return stats;
}

v1::StatsResponse NodeStats(uint64_t host_chunks, bool with_disk, const std::string& tenant) {
  v1::StatsResponse stats;
  *stats.add_tiers() = Tier(v1::TIER_HOST, host_chunks, host_chunks * 100, 1);
  if (with_disk) *stats.add_tiers() = Tier(v1::TIER_DISK, 10, 1000, 2);
  stats.set_sessions(1);
  stats.set_lookups(5);
  stats.set_hit_tokens(64);
  stats.mutable_control_lookups()->set_lookups(3);
  v1::TenantLookups& lookups = *stats.add_tenants();
  lookups.set_tenant(tenant);
  lookups.mutable_totals()->set_lookups(2);
  return stats;
}

TEST(ClusterStatsTest, TiersAndTenantsAddByTheirKey) {
  v1::StatsResponse totals;
  AddStats(NodeStats(3, false, "a"), totals);
  AddStats(NodeStats(4, true, "a"), totals);
  AddStats(NodeStats(5, true, "b"), totals);
  ASSERT_EQ(totals.tiers_size(), 2);
  EXPECT_EQ(totals.tiers(0).tier(), v1::TIER_HOST);
  EXPECT_EQ(totals.tiers(0).chunks(), 12u);
  EXPECT_EQ(totals.tiers(0).used_bytes(), 1200u);
  EXPECT_EQ(totals.tiers(0).hits(), 3u);
  EXPECT_EQ(totals.tiers(1).tier(), v1::TIER_DISK);
  EXPECT_EQ(totals.tiers(1).chunks(), 20u);
  EXPECT_EQ(totals.tiers(1).hits(), 4u);
  EXPECT_EQ(totals.sessions(), 3u);
  EXPECT_EQ(totals.lookups(), 15u);
  EXPECT_EQ(totals.hit_tokens(), 192u);
  EXPECT_EQ(totals.control_lookups().lookups(), 9u);
  ASSERT_EQ(totals.tenants_size(), 2);
  EXPECT_EQ(totals.tenants(0).tenant(), "a");
  EXPECT_EQ(totals.tenants(0).totals().lookups(), 4u);
  EXPECT_EQ(totals.tenants(1).tenant(), "b");
  EXPECT_EQ(totals.tenants(1).totals().lookups(), 2u);
}

TEST(ClusterStatsTest, DaemonsThatFailedAreListedNotSummed) {
  v1::NodeCallResponse nodes;
  v1::NodeResult& a = *nodes.add_results();
  a.set_instance_id("a");
  *a.mutable_stats() = NodeStats(3, false, "");
  v1::NodeResult& b = *nodes.add_results();
  b.set_instance_id("b");
  b.set_code(14);
  b.set_message("unreachable");
  std::vector<v1::InstanceInfo> members(2);
  members[0].set_following(true);
  const v1::ClusterStatsResponse response = ClusterStats(
      nodes, {.instances = 2, .live_entries = 7, .chunks = 5, .memory_bytes = 900}, members);
  EXPECT_EQ(response.instances(), 2u);
  EXPECT_EQ(response.following(), 1u);
  EXPECT_EQ(response.answered(), 1u);
  EXPECT_EQ(response.totals().tiers(0).chunks(), 3u);
  EXPECT_EQ(response.index().live_entries(), 7u);
  EXPECT_EQ(response.index().chunks(), 5u);
  EXPECT_EQ(response.index().memory_bytes(), 900u);
  ASSERT_EQ(response.nodes_size(), 2);
  EXPECT_EQ(response.nodes(1).message(), "unreachable");
}

TEST(ClusterStatsTest, NoDaemonsNoTotals) {
  const v1::ClusterStatsResponse response = ClusterStats({}, {}, {});
  EXPECT_EQ(response.answered(), 0u);
  EXPECT_EQ(response.totals().tiers_size(), 0);
  EXPECT_EQ(response.nodes_size(), 0);
}

}  // namespace
}  // namespace strata::controller
