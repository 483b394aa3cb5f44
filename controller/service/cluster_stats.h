// The cluster's Stats (StrataCluster.Stats): the daemons' Stats summed into totals, beside the
// controller's own index and membership. Plain functions over values; thread-safe.
#pragma once

#include <vector>

#include "controller/index/cluster_index.h"
#include "strata/v1/control.pb.h"

namespace strata::controller {

// Adds every counter of `from` into `into`: numbers add; the elements of a list (tiers, tenants)
// are matched by their first field (the tier, the tenant) and added, or appended when `into` has
// none of that key. Written by reflection over the messages, so a counter added to StatsResponse
// is summed without a change here.
void AddStats(const v1::StatsResponse& from, v1::StatsResponse& into);

// The answer: `nodes` (a forwarded Stats to every instance) summed over those that answered and
// kept whole; the index's figures; the members and how many are followed.
v1::ClusterStatsResponse ClusterStats(v1::NodeCallResponse nodes, const ClusterIndexStats& index,
                                      const std::vector<v1::InstanceInfo>& members);

}  // namespace strata::controller
