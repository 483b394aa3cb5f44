// InstanceRegistry: the cluster's members, the daemons registered with this controller. Each
// registration holds the daemon's endpoints, a lease renewed by heartbeats, and the DaemonFeed
// (controller/ingest) that keeps the daemon's chunks in the ClusterIndex. A member silent for
// `instance_timeout` is dropped by ExpireSilent, and its chunks vanish from the index before that
// returns (the feed's destruction drops the instance).
//
// Registering an id that is registered already with the same endpoints (the daemon restarted, or
// the controller lost its lease) replaces the registration: the old feed is stopped and its chunks
// dropped before the new feed starts, which takes a fresh snapshot. Registering it with other
// endpoints while its registration is live is refused (kAlreadyExists: two daemons claim one id);
// once the holder has been silent for the instance timeout, the id is free.
//
// The membership (Membership()) lists the members that serve peers, for the daemons to dial; it is
// rebuilt at each change and handed out as an immutable snapshot with a digest that names it. A
// lease id names one registration: heartbeats and deregistrations that name another (an older one)
// get NOT_FOUND, and the daemon registers again.
//
// With a MemberStore (the leader's records in etcd), every registration is recorded there and
// every departure forgotten, and a controller that takes over adopts the records (Adopt): the
// members keep their leases, so their heartbeats go on with no new registration, and their feeds
// start at once.
//
// Threading: every method is thread-safe. Register, Deregister and ExpireSilent start and stop
// feeds: they run one at a time (a feed's stop joins its thread, a few ms). Heartbeat, Query and
// List take only a short lock and never wait behind a feed's start or stop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "controller/ingest/daemon_feed.h"
#include "controller/membership/member_store.h"
#include "core/clock.h"
#include "strata/v1/control.pb.h"

namespace strata::controller {

// Starts the feed of a newly registered instance (its id and control endpoint in `registration`).
using FeedStarter = std::function<absl::StatusOr<std::unique_ptr<DaemonFeed>>(
    const v1::RegisterInstanceRequest& registration)>;

struct InstanceRegistryOptions {
  FeedStarter start_feed;
  std::chrono::milliseconds instance_timeout{10'000};
  std::chrono::milliseconds heartbeat_interval{2'000};  // told to the daemons
  // Where registrations are kept for a successor; null: nowhere. Not owned; outlives the registry.
  MemberStore* member_store = nullptr;
  const Clock* clock = SystemClock::Get();
};

// The limits of a registration's fields.
inline constexpr size_t kMaxInstanceIdBytes = 256;
inline constexpr size_t kMaxEndpointBytes = 1024;

class InstanceRegistry {
 public:
  // kInvalidArgument for a missing feed starter or clock, a zero timeout, or a heartbeat
  // interval that is not below the timeout.
  static absl::StatusOr<std::unique_ptr<InstanceRegistry>> Create(InstanceRegistryOptions options);
  // Stops every feed (their instances are dropped from the index).
  ~InstanceRegistry();

  InstanceRegistry(const InstanceRegistry&) = delete;
  InstanceRegistry& operator=(const InstanceRegistry&) = delete;

  // kInvalidArgument for an empty or over-long id, an id with control characters, or a control
  // endpoint that is neither "host:port" nor "unix:path"; kAlreadyExists for an id a live
  // registration holds under other endpoints; the feed starter's error otherwise
  // (kResourceExhausted when the index holds its most instances). The answer carries the
  // membership.
  absl::StatusOr<v1::RegisterInstanceResponse> Register(
      const v1::RegisterInstanceRequest& registration);
  // Renews the lease. kNotFound when `instance_id` holds no registration of `lease_id`.
  absl::Status Heartbeat(const std::string& instance_id, uint64_t lease_id);
  // Drops the registration now. kNotFound as for Heartbeat.
  absl::Status Deregister(const std::string& instance_id, uint64_t lease_id);
  // Drops every registration (a controller that stops leading forgets its members: they
  // register with the new leader). The member store keeps their records, for that leader.
  void DropAll();
  // Registers each record's instance under the record's lease, as if it had just heartbeaten,
  // and starts its feed; skips records of ids registered already and records that fail the
  // registration's checks or whose feed does not start (logged). Returns the ids adopted.
  std::vector<std::string> Adopt(std::span<const v1::InstanceRecord> records);
  // Drops every registration whose last heartbeat (or registration) is older than the timeout;
  // returns their ids.
  std::vector<std::string> ExpireSilent();

  // kNotFound for an id that is not registered.
  absl::StatusOr<v1::InstanceInfo> Query(const std::string& instance_id) const;
  // Every registration, by instance id.
  std::vector<v1::InstanceInfo> List() const;
  size_t size() const;
  // The members whose feed follows them (their snapshot indexed, their events applied).
  size_t following() const;
  // The members with a peer address, by id, and their digest; never null.
  std::shared_ptr<const v1::Membership> Membership() const;

 private:
  struct Member {
    v1::RegisterInstanceRequest registration;
    uint64_t lease_id = 0;
    MonoTime last_heard{};
    std::unique_ptr<DaemonFeed> feed;
  };

  explicit InstanceRegistry(InstanceRegistryOptions options);

  v1::InstanceInfo InfoLocked(const Member& member) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void RebuildMembershipLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells the member store (when there is one) of a registration or a departure; a failure is
  // logged.
  void Record(const v1::RegisterInstanceRequest& registration, uint64_t lease_id);
  void Forget(const std::string& instance_id);
  // The member's feed, taken out with its entry when the lease matches; kNotFound otherwise.
  absl::StatusOr<std::unique_ptr<DaemonFeed>> RemoveLocked(const std::string& instance_id,
                                                           uint64_t lease_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const InstanceRegistryOptions options_;

  // Serializes the calls that start and stop feeds (a feed of an id is stopped, dropping the
  // id from the index, before another feed of that id starts). Taken before mu_.
  absl::Mutex changes_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Member> members_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1::Membership> membership_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lease_ ABSL_GUARDED_BY(changes_mu_);
};

}  // namespace strata::controller
