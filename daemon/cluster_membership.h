// ClusterMembership keeps this daemon registered with the cluster's strata-controller
// (docs/cluster.md): it registers the instance (its id and the endpoints the controller dials and
// reports), then heartbeats under the lease the registration returned, at the interval the
// controller asked for. The controller indexes the daemon's chunks while the lease lives; a daemon
// that stops heartbeating is dropped after the controller's instance timeout, its chunks with it.
//
// Controllers are tried in the configured order until one takes the registration (a standby or
// an unreachable one is skipped). A heartbeat that fails at the controller registered with (it
// died, or it is a standby now) goes to the others in turn, under the same lease: a controller
// that took over adopted the registration from etcd, and takes the heartbeat as it is, with no
// new registration and no new snapshot. A heartbeat answered NOT_FOUND (the controller expired
// or replaced the lease, or restarted, or took over without the record) registers again at once,
// with that controller first; heartbeats that fail everywhere for the instance timeout register
// again through the list. A registration refused because another live daemon holds the instance
// id (ALREADY_EXISTS) is logged as an error, and retried: the id frees once that daemon has been
// silent for the instance timeout. Destruction deregisters (best effort, so a stopping daemon
// leaves routing answers at once rather than after the timeout).
//
// Peers: the controller's answers carry the membership (the members with a peer address) when it
// changed since the daemon last heard it; on_peers gets the peer addresses of the members this
// daemon dials each time, so that the remote tier dials members as they join and forgets them as
// they leave. Each pair of members is linked once, by the member whose instance id sorts first
// (a link serves both ways): on_peers names the members whose ids sort after this one's.
//
// Threading: Start spawns the membership's thread; stats() may be called from any thread; the
// destructor stops and joins it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/config.h"
#include "grpcpp/security/credentials.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::daemon {

struct ClusterMembershipOptions {
  std::vector<std::string> controllers;  // "host:port", tried in order
  v1::RegisterInstanceRequest registration;
  // Sent as "authorization: Bearer <token>" when not empty.
  std::string bearer_token;
  std::shared_ptr<grpc::ChannelCredentials> credentials;  // null: plaintext
  // Between rounds of registration attempts over every controller.
  std::chrono::milliseconds retry_delay{500};
  // The deadline of each call.
  std::chrono::milliseconds call_timeout{2'000};
  // The peer addresses of the members whose instance ids sort after this one's, each time the
  // membership changes; on the membership's thread. Null: the membership is not asked for.
  std::function<void(std::vector<std::string> peer_addresses)> on_peers;
};

// What this daemon registers as (see DaemonConfig::Cluster): `control_port` is the bound TCP
// port of the control API (0 when TCP is off), `remote_node_id` and `remote_address` the remote
// tier's ("" when it is off).
v1::RegisterInstanceRequest BuildRegistration(const DaemonConfig& config, int control_port,
                                              const std::string& remote_node_id,
                                              const std::string& remote_address);

struct ClusterMembershipStats {
  bool registered = false;
  std::string controller;  // the one holding the registration ("" when not registered)
  uint64_t lease_id = 0;
  uint64_t registrations = 0;  // successful ones
  uint64_t heartbeats = 0;     // acknowledged ones
  uint64_t failed_calls = 0;
  uint64_t membership_updates = 0;  // memberships received that differed from the last
  std::string refusal;  // why the last registration attempt was refused ("" once registered)
};

class ClusterMembership {
 public:
  // kInvalidArgument for no controllers or an empty instance id.
  static absl::StatusOr<std::unique_ptr<ClusterMembership>> Start(ClusterMembershipOptions options);
  ~ClusterMembership();

  ClusterMembership(const ClusterMembership&) = delete;
  ClusterMembership& operator=(const ClusterMembership&) = delete;

  ClusterMembershipStats stats() const;

 private:
  explicit ClusterMembership(ClusterMembershipOptions options);

  void Run();
  // Tries every controller once from next_controller_; true when one took the registration.
  bool RegisterOnce();
  // OK, or the heartbeat's failure (NOT_FOUND: the lease is gone).
  // A heartbeat to the controller registered with, then to each other one, until one answers OK
  // (it is the controller registered with from then on) or NOT_FOUND (tried first when the
  // daemon registers again); the last error when none did.
  absl::Status HeartbeatAnywhere();
  absl::Status HeartbeatTo(size_t index);
  void Deregister();
  // Hands a membership the controller sent to on_peers, unless it is the one known already.
  void Learn(const v1::Membership& membership);
  // Waits `delay`, or less when stopping; false when stopping.
  bool Wait(std::chrono::milliseconds delay);
  void Prepare(grpc::ClientContext& context) const;

  const ClusterMembershipOptions options_;
  std::vector<std::unique_ptr<v1::StrataCluster::Stub>> stubs_;  // one per controller

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  ClusterMembershipStats stats_ ABSL_GUARDED_BY(mu_);
  // Only the membership's thread touches these.
  size_t current_ = 0;  // the controller registered with, or to try first
  std::chrono::milliseconds heartbeat_interval_{1'000};
  std::chrono::milliseconds instance_timeout_{10'000};
  uint64_t membership_digest_ = 0;  // of the membership last handed to on_peers

  std::thread thread_;
};

}  // namespace strata::daemon
