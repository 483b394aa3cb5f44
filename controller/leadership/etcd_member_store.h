// EtcdMemberStore: the MemberStore in etcd, one key per member under `prefix` (by default
// "/strata/controller/leader/members/"), its value a serialized v1::InstanceRecord. Keys carry no
// lease: they outlive the controller that wrote them, for its successor.
//
// Fenced by the election: every write is a transaction that succeeds only while the election key
// names this controller, so a deposed leader that has not noticed yet cannot overwrite or delete
// its successor's records (kFailedPrecondition). Reads are not fenced.
//
// Threading: thread-safe (each call is one etcd call). Ownership: shares the etcd client.
// Lifecycle: writes need the candidate (SetCandidate, once the controller's address is known:
// before its election starts); until then they fail kFailedPrecondition.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "controller/leadership/etcd_client.h"
#include "controller/membership/member_store.h"

namespace strata::controller {

struct EtcdMemberStoreOptions {
  std::shared_ptr<EtcdClient> etcd;
  std::string prefix;
  // The election's key: the fence.
  std::string election_key;
};

class EtcdMemberStore : public MemberStore {
 public:
  explicit EtcdMemberStore(EtcdMemberStoreOptions options);

  // This controller's value for the election key.
  void SetCandidate(std::string candidate);

  // kUnavailable when etcd does not answer; kFailedPrecondition when this controller does not
  // hold the election key.
  absl::Status Record(const v1::InstanceRecord& record) override;
  absl::Status Forget(const std::string& instance_id) override;
  // kUnavailable when etcd does not answer; kDataLoss naming a key whose value does not parse.
  absl::StatusOr<std::vector<v1::InstanceRecord>> Load() override;

 private:
  // Runs `txn` behind the fence.
  absl::Status Fenced(etcdserverpb::TxnRequest txn, const char* what);

  const EtcdMemberStoreOptions options_;
  absl::Mutex mu_;
  std::string candidate_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::controller
