// Daemon owns stratad's subsystems and starts and stops them in order:
//   start: event log -> tiered store (lower tiers recovered, host tier) -> engine session server
//          -> gRPC control server (TCP and Unix socket) -> metrics endpoint -> cluster membership
//   stop:  leave the cluster (deregister) -> mark draining -> gRPC shutdown (in-flight calls
//   finish, bounded by the drain timeout)
//          -> session server stop (every session's leases released, reservations aborted)
//          -> store stop (loads in flight finish, queued demotions written) -> store destroyed
//          (arena unmapped)
// Members are declared in dependency order, so destruction runs in reverse.
// Thread-safety: Create, Start and Stop are called from one thread (stratad's main thread).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/background_prefault.h"
#include "daemon/cluster_membership.h"
#include "daemon/config.h"
#include "daemon/control_service.h"
#include "daemon/engine_session_server.h"
#include "daemon/event_log.h"
#include "daemon/lookup_accounting.h"
#include "daemon/metrics.h"
#include "daemon/vllm_event_publisher.h"
#include "grpcpp/server.h"
#include "storage/device/device_pools.h"
#include "storage/device/device_runtime.h"
#include "storage/host/host_tier.h"
#include "storage/remote/remote_node.h"
#include "storage/remote/remote_tier.h"
#include "storage/tiered/device_pool_tiering.h"
#include "storage/tiered/tiered_store.h"

namespace strata::daemon {

class Daemon {
 public:
  // Builds every subsystem (binding sockets) without serving yet. Errors name the subsystem.
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(const DaemonConfig& config);

  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  ~Daemon();

  // Starts serving engines and control clients. kUnavailable when a gRPC port cannot be bound.
  absl::Status Start();
  // Drains and stops (see above); idempotent.
  void Stop();

  storage::HostTier& host_tier() { return store_->host(); }
  // The TCP port gRPC bound (useful with listen_address "127.0.0.1:0"), 0 when TCP is off.
  int control_port() const { return control_port_; }
  // Where peer daemons reach this one ("" when the remote tier is off).
  std::string remote_address() const { return remote_ ? remote_->listen_address() : ""; }
  // The port of the metrics endpoint, 0 when it is off.
  int metrics_port() const { return metrics_exposer_ ? metrics_exposer_->port() : 0; }
  const DaemonConfig& config() const { return config_; }

 private:
  explicit Daemon(DaemonConfig config);

  const DaemonConfig config_;
  // Components register their histograms here; the exposer (when configured) serves it and
  // node_metrics_.
  const std::shared_ptr<prometheus::Registry> registry_;
  // Observes the host tier and feeds WatchEvents streams: outlives both.
  std::unique_ptr<EventLog> event_log_;
  // The engines' and control-API lookups, counted by the sessions and the control service.
  const std::unique_ptr<LookupAccounting> lookups_ = std::make_unique<LookupAccounting>();
  // Republishes event_log_ in vLLM's format when configured.
  std::unique_ptr<VllmEventPublisher> kv_publisher_;
  // The tiers; the event log observes its host tier.
  std::unique_ptr<storage::TieredStore> store_;
  // Allocates the host arena's pages in the background ([host] background_prefault; null when
  // off, or with prefault): goes before the store.
  std::unique_ptr<BackgroundPrefault> arena_prefault_;
  // The remote tier (owned by store_; null when [remote] is off) and the node's side of the
  // cluster, which the tier reaches peers through: goes before the store (its transport
  // registered the store's arena).
  storage::remote::RemoteTier* remote_tier_ = nullptr;
  std::unique_ptr<storage::remote::RemoteNode> remote_;
  // The T0 pools engines are granted at their handshake, and the runtime that allocates them;
  // null when [device_pool] bytes_per_layout is 0.
  std::unique_ptr<storage::DeviceRuntime> device_runtime_;
  // Demotes what the pools evict to the host tier (or ahead of their eviction, on its thread:
  // Stop stops that before the pools go) and promotes it back: outlives the pools.
  std::unique_ptr<storage::DevicePoolTiering> device_pool_tiering_;
  std::unique_ptr<storage::DevicePools> device_pools_;
  std::unique_ptr<EngineSessionServer> sessions_;
  std::unique_ptr<ControlService> control_service_;
  std::unique_ptr<grpc::Server> control_server_;
  std::shared_ptr<NodeCollector> node_metrics_;
  std::unique_ptr<MetricsExposer> metrics_exposer_;
  // Registered with the cluster's controller while serving (null without [cluster] controllers).
  std::unique_ptr<ClusterMembership> membership_;
  int control_port_ = 0;
  bool stopped_ = false;
};

}  // namespace strata::daemon
