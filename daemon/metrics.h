// The daemon's Prometheus metrics. Names are strata_* with units in the names (_bytes,
// _seconds, _total for counters).
//
// Two kinds of source:
//   - state that components already count (host tier accounting, sessions, Lookup token counts)
//     is read at scrape time by NodeCollector: nothing is counted twice, nothing costs on the
//     hot path;
//   - latencies are observed where they happen, into histograms that components register on the
//     registry they are given (ControlService: Lookup; EngineSessionServer: engine requests).
// MetricsExposer serves a registry over HTTP (/metrics).
//
// Thread-safety: the collector and the exposer are thread-safe; prometheus-cpp histograms are.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/lookup_accounting.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "storage/device/device_pools.h"
#include "storage/remote/remote_node.h"
#include "storage/tiered/device_pool_tiering.h"
#include "storage/tiered/tiered_store.h"

namespace strata::daemon {

// Latency buckets, in seconds, shared by every strata_*_duration_seconds histogram: 10 us to 1 s.
prometheus::Histogram::BucketBoundaries LatencyBuckets();
// Bucket bounds (seconds) for transfers of chunks, 100 us to 5 s.
prometheus::Histogram::BucketBoundaries TransferBuckets();

// What NodeCollector reads at each scrape. Every field is nullable / optional.
struct NodeSources {
  // Every tier's series ({tier="host"}, {tier="disk"}, ...) and the movement between tiers
  // (demotions, prefetches, loads promoted, write-through).
  const storage::TieredStore* store = nullptr;
  // Active and total engine sessions.
  std::function<std::pair<uint64_t, uint64_t>()> sessions;
  // The engines' and control-API lookups, per tenant, and the tokens each tier held or none did.
  const LookupAccounting* lookups = nullptr;
  // The node's peers and what it served them (strata_remote_*); null when [remote] is off.
  const storage::remote::RemoteNode* remote = nullptr;
  // The device pools (strata_device_pool_*, one series set per layout); null without any.
  const storage::DevicePools* device_pools = nullptr;
  // What moved between the pools and the host tier (strata_device_pool_tiering_*); null
  // without pools.
  const storage::DevicePoolTiering* device_pool_tiering = nullptr;
};

// Builds the strata_* families from NodeSources when scraped.
class NodeCollector final : public prometheus::Collectable {
 public:
  explicit NodeCollector(NodeSources sources) : sources_(std::move(sources)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const NodeSources sources_;
};

// Serves `collectables` (registries, collectors) on `listen_address` ("host:port"; port 0 picks
// one) at /metrics.
class MetricsExposer {
 public:
  // kUnavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Create(
      const std::string& listen_address,
      const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables);
  // Stops serving within milliseconds. civetweb 1.15 (Debian's, under prometheus-cpp) notices
  // mg_stop only when its listener's poll returns, which without traffic takes up to its 2 s
  // poll quantum (fixed upstream in civetweb 1.16 by a wake-up socket); so while the exposer
  // stops, a helper thread connects to the listening port every few milliseconds to end that
  // poll at once.
  ~MetricsExposer();
  int port() const { return port_; }

 private:
  MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer, int port,
                 std::vector<std::byte> wake_address)
      : exposer_(std::move(exposer)), port_(port), wake_address_(std::move(wake_address)) {}

  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_;
  // A sockaddr that reaches the listening socket (loopback for a wildcard address).
  std::vector<std::byte> wake_address_;
};

}  // namespace strata::daemon
