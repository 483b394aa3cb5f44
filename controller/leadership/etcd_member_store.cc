#include "controller/leadership/etcd_member_store.h"

#include <utility>

#include "fmt/format.h"

namespace strata::controller {

EtcdMemberStore::EtcdMemberStore(EtcdMemberStoreOptions options) : options_(std::move(options)) {}

void EtcdMemberStore::SetCandidate(std::string candidate) {
  absl::MutexLock lock(&mu_);
  candidate_ = std::move(candidate);
}

absl::Status EtcdMemberStore::Fenced(etcdserverpb::TxnRequest txn, const char* what) {
  std::string candidate;
  {
    absl::MutexLock lock(&mu_);
    candidate = candidate_;
  }
  if (candidate.empty()) {
    return absl::FailedPreconditionError(fmt::format("{}: no candidate set yet", what));
  }
  etcdserverpb::Compare* leading = txn.add_compare();
  leading->set_key(options_.election_key);
  leading->set_target(etcdserverpb::Compare::VALUE);
  leading->set_result(etcdserverpb::Compare::EQUAL);
  leading->set_value(candidate);
  EtcdClient& etcd = *options_.etcd;
  grpc::ClientContext context;
  etcd.SetDeadline(context);
  etcdserverpb::TxnResponse response;
  const grpc::Status status = etcd.kv().Txn(&context, txn, &response);
  if (!status.ok()) return etcd.Failed(what, status);
  if (!response.succeeded()) {
    return absl::FailedPreconditionError(fmt::format(
        "{}: {} does not hold {} (no longer the leader)", what, candidate, options_.election_key));
  }
  return absl::OkStatus();
}

absl::Status EtcdMemberStore::Record(const v1::InstanceRecord& record) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(options_.prefix + record.registration().instance_id());
  put->set_value(record.SerializeAsString());
  return Fenced(std::move(txn), "member record");
}

absl::Status EtcdMemberStore::Forget(const std::string& instance_id) {
  etcdserverpb::TxnRequest txn;
  txn.add_success()->mutable_request_delete_range()->set_key(options_.prefix + instance_id);
  return Fenced(std::move(txn), "member removal");
}

absl::StatusOr<std::vector<v1::InstanceRecord>> EtcdMemberStore::Load() {
  etcdserverpb::RangeRequest request;
  request.set_key(options_.prefix);
  request.set_range_end(PrefixRangeEnd(options_.prefix));
  EtcdClient& etcd = *options_.etcd;
  grpc::ClientContext context;
  etcd.SetDeadline(context);
  etcdserverpb::RangeResponse response;
  const grpc::Status status = etcd.kv().Range(&context, request, &response);
  if (!status.ok()) return etcd.Failed("read of the members", status);
  std::vector<v1::InstanceRecord> records;
  records.reserve(response.kvs_size());
  for (const etcdserverpb::KeyValue& kv : response.kvs()) {
    v1::InstanceRecord record;
    if (!record.ParseFromString(kv.value())) {
      return absl::DataLossError(fmt::format("etcd key {} holds no member record", kv.key()));
    }
    records.push_back(std::move(record));
  }
  return records;
}

}  // namespace strata::controller
