// Controller owns strata-controller's parts and starts and stops them in order:
//   start: cluster index -> event hub -> instance registry (a feed per registered daemon, each
//          publishing to the hub) -> node forwarder -> a feed per [vllm] engine
//          -> cluster API (gRPC) -> leader election (with [cluster] etcd_endpoints) ->
//          housekeeping thread
//   stop:  election (a leader steps down and revokes its lease: a standby takes over at once)
//          -> housekeeping thread -> gRPC shutdown (forwarded calls complete) -> registry (every
//          feed stopped) -> the vLLM engines' feeds -> forwarder -> event hub -> index
// The [vllm] engines' feeds run on standbys too (their index is warm when they take over); the
// engines are in the index (Lookup, Route, WatchEvents), not in the registry: they have no
// daemon to forward calls to, so ListInstances and QueryInstance do not name them.
// A controller with etcd endpoints answers only while it leads (standbys refuse every call
// UNAVAILABLE, naming the leader), and forgets its registrations when it stops leading. The
// leader keeps its members' registrations in etcd (EtcdMemberStore); the controller that takes
// over adopts them, leases included, so the daemons' heartbeats go on, and answers Lookup and
// Route only once every adopted daemon's snapshot is in its index (or the daemons' unreachable
// timeout has passed): a new leader answers whole or not at all.
// The housekeeping thread drops daemons that stopped heartbeating (InstanceRegistry::
// ExpireSilent) and reclaims the index's stale entries a shard at a time (ClusterIndex::Sweep).
//
// Threading: Create, Start and Stop are called from one thread (the main thread); registry() and
// index() may be used from any thread while the controller lives.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "controller/index/cluster_index.h"
#include "controller/ingest/vllm_feed.h"
#include "controller/leadership/etcd_member_store.h"
#include "controller/leadership/leader_election.h"
#include "controller/membership/instance_registry.h"
#include "controller/server/controller_config.h"
#include "controller/service/cluster_service.h"
#include "core/key_hasher.h"
#include "grpcpp/server.h"

namespace strata::controller {

class Controller {
 public:
  // Builds the parts without serving yet. kInvalidArgument for unreadable token or TLS files.
  static absl::StatusOr<std::unique_ptr<Controller>> Create(const ControllerConfig& config);
  ~Controller();

  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Serves the cluster API. kUnavailable when the address cannot be bound.
  absl::Status Start();
  // Idempotent.
  void Stop();

  // The bound TCP port (useful with a listen address of port 0).
  int port() const { return port_; }
  const ClusterIndex& index() const { return *index_; }
  const InstanceRegistry& registry() const { return *registry_; }
  // Whether this controller answers: it leads, or runs without etcd.
  bool leading() const { return leading_.load(); }

 private:
  explicit Controller(ControllerConfig config)
      : config_(std::move(config)), leading_(config_.cluster.etcd_endpoints.empty()) {}

  // A feed per [vllm] instance; the feeds' errors (an id a daemon took, a bad endpoint).
  absl::Status StartVllmFeeds();
  void Housekeep();
  // The election's news: adopts the predecessor's members on taking over, forgets them all on
  // stepping down.
  void OnLeadershipChange(bool leading);
  // OK while leading; else UNAVAILABLE naming the leader.
  absl::Status Serving() const;
  // Whether the index is complete now (the housekeeper's last look; cheap).
  IndexCompleteness Completeness() const;
  // Looks again: every registered instance followed, and without etcd, the instance timeout
  // passed since this controller started leading (the daemons re-register within it).
  void UpdateCompleteness();
  // The address this controller is known as while it leads.
  std::string AdvertisedAddress() const;

  const ControllerConfig config_;
  // [keys], parsed once: what Lookup, Route and the vLLM engines' feeds hash prompts with.
  KeyHasherOptions key_options_;
  // With etcd endpoints: the cluster's etcd and the members kept there (outlive the registry).
  std::shared_ptr<EtcdClient> etcd_;
  std::unique_ptr<EtcdMemberStore> member_store_;
  std::unique_ptr<ClusterIndex> index_;
  // What the feeds apply, on its way to WatchEvents' watchers (outlives the feeds).
  std::unique_ptr<EventHub> events_ = std::make_unique<EventHub>();
  std::unique_ptr<InstanceRegistry> registry_;
  std::unique_ptr<NodeForwarder> forwarder_;
  std::vector<std::unique_ptr<VllmFeed>> vllm_feeds_;
  std::unique_ptr<ClusterService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  // Without etcd, a controller leads from the start.
  std::atomic<bool> leading_;
  std::unique_ptr<LeaderElection> election_;

  // The index's completeness, as UpdateCompleteness last found it: `complete_` is read by every
  // Lookup and Route without the lock, the reason under it.
  std::atomic<bool> complete_{false};
  mutable absl::Mutex completeness_mu_;
  std::string incomplete_reason_ ABSL_GUARDED_BY(completeness_mu_);
  std::chrono::steady_clock::time_point leading_since_ ABSL_GUARDED_BY(completeness_mu_) =
      std::chrono::steady_clock::now();

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread housekeeper_;
  bool stopped_ = false;
};

}  // namespace strata::controller
