#include "controller/leadership/leader_election.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace strata::controller {

absl::StatusOr<std::unique_ptr<LeaderElection>> LeaderElection::Start(
    LeaderElectionOptions options) {
  if (options.etcd == nullptr || options.key.empty() || options.candidate.empty() ||
      options.lease_ttl_s < 1) {
    return absl::InvalidArgumentError(
        "a leader election needs an etcd client, a key, a candidate and a lease TTL of 1 s or "
        "more");
  }
  std::unique_ptr<LeaderElection> election(new LeaderElection(std::move(options)));
  election->thread_ = std::thread([e = election.get()] { e->Run(); });
  return election;
}

LeaderElection::LeaderElection(LeaderElectionOptions options)
    : options_(std::move(options)), etcd_(*options_.etcd) {}

LeaderElection::~LeaderElection() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (stream_context_ != nullptr) stream_context_->TryCancel();
  }
  thread_.join();
}

LeaderElectionState LeaderElection::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

void LeaderElection::RecordError(const std::string& what, const grpc::Status& status) {
  const std::string error = std::string(etcd_.Failed(what, status).message());
  spdlog::debug("leader election: {}", error);
  absl::MutexLock lock(&mu_);
  state_.last_error = error;
}

bool LeaderElection::Wait(std::chrono::milliseconds delay) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(delay));
  return !stopping_;
}

void LeaderElection::SetLeading(bool leading) {
  {
    absl::MutexLock lock(&mu_);
    if (state_.leading == leading) return;
    state_.leading = leading;
    if (leading) {
      state_.leader = options_.candidate;
      ++state_.terms;
    }
  }
  spdlog::info("leader election: {} {} ({})", options_.candidate,
               leading ? "leads" : "no longer leads", options_.key);
  if (options_.on_change) options_.on_change(leading);
}

absl::StatusOr<int64_t> LeaderElection::GrantLease() {
  grpc::ClientContext context;
  etcd_.SetDeadline(context);
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(options_.lease_ttl_s);
  etcdserverpb::LeaseGrantResponse response;
  const grpc::Status status = etcd_.lease().LeaseGrant(&context, request, &response);
  if (!status.ok()) {
    RecordError("lease grant", status);
    return absl::UnavailableError(status.error_message());
  }
  if (!response.error().empty() || response.id() == 0) {
    return absl::UnavailableError(fmt::format("etcd refused a lease: {}", response.error()));
  }
  return response.id();
}

void LeaderElection::RevokeLease(int64_t lease) {
  grpc::ClientContext context;
  etcd_.SetDeadline(context);
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  const grpc::Status status = etcd_.lease().LeaseRevoke(&context, request, &response);
  if (!status.ok()) RecordError("lease revoke", status);  // it expires within the TTL anyway
}

absl::StatusOr<bool> LeaderElection::Campaign(int64_t lease) {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* vacant = txn.add_compare();
  vacant->set_key(options_.key);
  vacant->set_target(etcdserverpb::Compare::CREATE);
  vacant->set_result(etcdserverpb::Compare::EQUAL);
  vacant->set_create_revision(0);
  etcdserverpb::PutRequest* claim = txn.add_success()->mutable_request_put();
  claim->set_key(options_.key);
  claim->set_value(options_.candidate);
  claim->set_lease(lease);
  txn.add_failure()->mutable_request_range()->set_key(options_.key);

  grpc::ClientContext context;
  etcd_.SetDeadline(context);
  etcdserverpb::TxnResponse response;
  const grpc::Status status = etcd_.kv().Txn(&context, txn, &response);
  if (!status.ok()) {
    RecordError("campaign", status);
    return absl::UnavailableError(status.error_message());
  }
  if (response.succeeded()) return true;
  std::string leader;
  if (response.responses_size() == 1 && response.responses(0).has_response_range() &&
      response.responses(0).response_range().kvs_size() == 1) {
    leader = response.responses(0).response_range().kvs(0).value();
  }
  absl::MutexLock lock(&mu_);
  state_.leader = std::move(leader);
  return false;
}

void LeaderElection::Lead(int64_t lease) {
  const auto ttl = std::chrono::milliseconds(options_.lease_ttl_s * 1000);
  const auto step_down_after = ttl / 2;
  auto renewed = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - renewed < step_down_after) {
    grpc::ClientContext context;
    // The stream ends when this candidate would have to step down without a renewal: an etcd
    // that hangs cannot keep a leader leading past it.
    context.set_deadline(std::chrono::system_clock::now() +
                         (renewed + step_down_after - std::chrono::steady_clock::now()));
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      stream_context_ = &context;
    }
    auto stream = etcd_.lease().LeaseKeepAlive(&context);
    etcdserverpb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    etcdserverpb::LeaseKeepAliveResponse response;
    bool expired = false, stopped = false;
    while (stream->Write(request) && stream->Read(&response)) {
      if (response.ttl() <= 0) {
        expired = true;  // the key went with the lease: another candidate may lead now
        break;
      }
      renewed = std::chrono::steady_clock::now();
      if (!Wait(ttl / 3)) {
        stopped = true;
        break;
      }
    }
    if (expired || stopped) context.TryCancel();
    const grpc::Status status = stream->Finish();
    {
      absl::MutexLock lock(&mu_);
      stream_context_ = nullptr;
      if (stopping_) return;
    }
    if (expired) return;
    // A stream that reached its deadline after renewals is replaced; a failed one is an error.
    if (status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      RecordError("lease keep-alive", status);
      if (!Wait(options_.poll_interval)) return;
    }
  }
}

bool LeaderElection::FollowUntilVacant() {
  while (Wait(options_.poll_interval)) {
    etcdserverpb::RangeRequest request;
    request.set_key(options_.key);
    grpc::ClientContext context;
    etcd_.SetDeadline(context);
    etcdserverpb::RangeResponse response;
    const grpc::Status status = etcd_.kv().Range(&context, request, &response);
    if (!status.ok()) {
      RecordError("read of the leader key", status);
      continue;
    }
    if (response.kvs_size() == 0) return true;
    absl::MutexLock lock(&mu_);
    state_.leader = response.kvs(0).value();
  }
  return false;
}

void LeaderElection::Run() {
  while (true) {
    absl::StatusOr<int64_t> lease = GrantLease();
    if (!lease.ok()) {
      if (!Wait(options_.poll_interval)) return;
      continue;
    }
    absl::StatusOr<bool> won = Campaign(*lease);
    if (won.ok() && *won) {
      SetLeading(true);
      Lead(*lease);
      SetLeading(false);
      RevokeLease(*lease);  // the key goes now: a standby need not wait for the TTL
      if (!Wait(std::chrono::milliseconds(0))) return;
      continue;
    }
    RevokeLease(*lease);
    if (!won.ok()) {
      if (!Wait(options_.poll_interval)) return;
      continue;
    }
    if (!FollowUntilVacant()) return;
  }
}

}  // namespace strata::controller
