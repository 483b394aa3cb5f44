// LeaderElection: which of the cluster's strata-controllers leads, decided through etcd.
// etcd's v3 API is spoken over gRPC with stubs of the subset we need
// (proto/etcd/etcd_v3_subset.proto); no consensus of our own.
//
// The leader holds one key (`key`, its value the leader's cluster API address) under an etcd
// lease of `lease_ttl_s` seconds, which it keeps alive every third of the TTL. A candidate
// campaigns with one transaction: if the key was never created (create_revision 0), put it with
// its own lease, else read who holds it. Standbys poll the key every `poll_interval` and
// campaign once it is gone: when the leader dies its lease expires within the TTL, so a standby
// leads within TTL + poll interval (about 2.3 s by default). A leader that cannot renew its lease
// for half the TTL steps down at once (it may be cut off from etcd while a standby takes over);
// one that stops revokes its lease, and a standby takes over at its next poll.
//
// Threading: Start spawns the election's thread, which calls on_change (leading or not) on every
// change, and never two at once. state() may be called from any thread. The destructor stops
// the thread (a leader steps down first, on_change(false) included).
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
#include "controller/leadership/etcd_client.h"
#include "grpcpp/client_context.h"

namespace strata::controller {

struct LeaderElectionOptions {
  // The cluster's etcd (shared with the controller's member records).
  std::shared_ptr<EtcdClient> etcd;
  std::string key = "/strata/controller/leader";
  // This candidate's value for the key: the address standbys and daemons are told to use.
  std::string candidate;
  int64_t lease_ttl_s = 2;  // etcd's minimum is about 1.5 s, rounded up
  std::chrono::milliseconds poll_interval{250};
  // Called on the election's thread with true when this candidate starts leading, false when it
  // stops.
  std::function<void(bool leading)> on_change;
};

struct LeaderElectionState {
  bool leading = false;
  std::string leader;  // the leader's value as last read ("" when none was seen)
  uint64_t terms = 0;  // times this candidate became the leader
  std::string last_error;
};

class LeaderElection {
 public:
  // kInvalidArgument for no etcd client, an empty key or candidate, or a TTL below 1 s.
  static absl::StatusOr<std::unique_ptr<LeaderElection>> Start(LeaderElectionOptions options);
  ~LeaderElection();

  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  LeaderElectionState state() const;

 private:
  explicit LeaderElection(LeaderElectionOptions options);

  void Run();
  // One campaign: true when this candidate now holds the key under `lease`.
  absl::StatusOr<bool> Campaign(int64_t lease);
  // Keeps `lease` alive until it is lost or the election stops.
  void Lead(int64_t lease);
  // Polls the key until it is gone (true) or the election stops (false).
  bool FollowUntilVacant();
  absl::StatusOr<int64_t> GrantLease();
  void RevokeLease(int64_t lease);
  void SetLeading(bool leading);
  void RecordError(const std::string& what, const grpc::Status& status);
  // Waits `delay`, or less when stopping; false when stopping.
  bool Wait(std::chrono::milliseconds delay);

  const LeaderElectionOptions options_;
  EtcdClient& etcd_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  LeaderElectionState state_ ABSL_GUARDED_BY(mu_);
  // The keep-alive stream in flight, cancelled by the destructor.
  grpc::ClientContext* stream_context_ ABSL_GUARDED_BY(mu_) = nullptr;

  std::thread thread_;
};

}  // namespace strata::controller
