#include "daemon/cluster_membership.h"

#include <algorithm>
#include <utility>

#include "absl/time/time.h"
#include "control/bearer_auth.h"
#include "control/redialing_channel.h"
#include "core/fmt_absl.h"
#include "core/host_address.h"
#include "fmt/format.h"
#include "fmt/ranges.h"
#include "proto/convert.h"
#include "spdlog/spdlog.h"

namespace strata::daemon {

v1::RegisterInstanceRequest BuildRegistration(const DaemonConfig& config, int control_port,
                                              const std::string& remote_node_id,
                                              const std::string& remote_address) {
  v1::RegisterInstanceRequest registration;
  std::string control = config.cluster.advertise_address;
  if (control.empty() && control_port != 0) {
    control = DialableAddress(config.control.listen_address, control_port);
  }
  std::string id = config.cluster.instance_id;
  if (id.empty()) id = remote_node_id;
  if (id.empty()) id = fmt::format("{}:{}", HostName(), control_port);
  registration.set_instance_id(std::move(id));
  registration.set_control_endpoint(std::move(control));
  registration.set_engine_endpoint(config.engine.socket_path);
  registration.set_peer_address(remote_address);
  return registration;
}

absl::StatusOr<std::unique_ptr<ClusterMembership>> ClusterMembership::Start(
    ClusterMembershipOptions options) {
  if (options.controllers.empty()) {
    return absl::InvalidArgumentError("cluster membership needs a controller address");
  }
  if (options.registration.instance_id().empty()) {
    return absl::InvalidArgumentError("cluster membership needs an instance id");
  }
  if (options.credentials == nullptr) options.credentials = grpc::InsecureChannelCredentials();
  std::unique_ptr<ClusterMembership> membership(new ClusterMembership(std::move(options)));
  membership->thread_ = std::thread([m = membership.get()] { m->Run(); });
  return membership;
}

ClusterMembership::ClusterMembership(ClusterMembershipOptions options)
    : options_(std::move(options)) {
  for (const std::string& address : options_.controllers) {
    stubs_.push_back(
        v1::StrataCluster::NewStub(control::CreateRedialingChannel(address, options_.credentials)));
  }
}

ClusterMembership::~ClusterMembership() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  Deregister();
}

ClusterMembershipStats ClusterMembership::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void ClusterMembership::Run() {
  bool registered = false;
  auto last_heard = std::chrono::steady_clock::now();
  while (true) {
    if (!registered) {
      registered = RegisterOnce();
      last_heard = std::chrono::steady_clock::now();
      if (!registered && !Wait(options_.retry_delay)) return;
      continue;
    }
    if (!Wait(heartbeat_interval_)) return;
    const absl::Status beat = HeartbeatAnywhere();
    if (beat.ok()) {
      last_heard = std::chrono::steady_clock::now();
      continue;
    }
    // NOT_FOUND: a controller that leads holds no such lease. Failing everywhere for the
    // instance timeout: the lease is gone wherever it was. Either way, register again.
    if (beat.code() == absl::StatusCode::kNotFound ||
        std::chrono::steady_clock::now() - last_heard >= instance_timeout_) {
      spdlog::warn("cluster: {} (controller {}); registering again", beat.message(),
                   options_.controllers[current_]);
      registered = false;
      absl::MutexLock lock(&mu_);
      stats_.registered = false;
      stats_.controller.clear();
    }
  }
}

absl::Status ClusterMembership::HeartbeatAnywhere() {
  absl::Status last;
  for (size_t attempt = 0; attempt < stubs_.size(); ++attempt) {
    const size_t index = (current_ + attempt) % stubs_.size();
    last = HeartbeatTo(index);
    if (!last.ok() && last.code() != absl::StatusCode::kNotFound) continue;
    if (index != current_) {
      current_ = index;
      if (last.ok()) {
        spdlog::info("cluster: controller {} carries on the registration (lease kept)",
                     options_.controllers[index]);
        absl::MutexLock lock(&mu_);
        stats_.controller = options_.controllers[index];
      }
    }
    return last;
  }
  return last;
}

bool ClusterMembership::RegisterOnce() {
  for (size_t attempt = 0; attempt < stubs_.size(); ++attempt) {
    const size_t index = (current_ + attempt) % stubs_.size();
    grpc::ClientContext context;
    Prepare(context);
    v1::RegisterInstanceResponse response;
    const grpc::Status status =
        stubs_[index]->RegisterInstance(&context, options_.registration, &response);
    if (!status.ok()) {
      absl::MutexLock lock(&mu_);
      ++stats_.failed_calls;
      if (status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
        // Another daemon holds this id: an operator's mistake to report, once per reason.
        if (stats_.refusal != status.error_message()) {
          spdlog::error("cluster: controller {} refused the registration: {}",
                        options_.controllers[index], status.error_message());
        }
        stats_.refusal = status.error_message();
        return false;
      }
      spdlog::debug("cluster: controller {} refused the registration: {}",
                    options_.controllers[index], status.error_message());
      continue;
    }
    Learn(response.membership());
    absl::MutexLock lock(&mu_);
    stats_.refusal.clear();
    current_ = index;
    heartbeat_interval_ = std::chrono::milliseconds(std::max(response.heartbeat_interval_ms(), 1u));
    instance_timeout_ = std::chrono::milliseconds(response.instance_timeout_ms());
    stats_.registered = true;
    stats_.controller = options_.controllers[index];
    stats_.lease_id = response.lease_id();
    ++stats_.registrations;
    spdlog::info("cluster: registered as '{}' with controller {} (lease {}, heartbeat every {} ms)",
                 options_.registration.instance_id(), stats_.controller, stats_.lease_id,
                 heartbeat_interval_.count());
    return true;
  }
  return false;
}

absl::Status ClusterMembership::HeartbeatTo(size_t index) {
  v1::HeartbeatRequest request;
  request.set_instance_id(options_.registration.instance_id());
  if (options_.on_peers) request.set_membership_digest(membership_digest_);
  {
    absl::MutexLock lock(&mu_);
    request.set_lease_id(stats_.lease_id);
  }
  grpc::ClientContext context;
  Prepare(context);
  v1::HeartbeatResponse response;
  const grpc::Status status = stubs_[index]->Heartbeat(&context, request, &response);
  if (status.ok() && response.has_membership()) Learn(response.membership());
  absl::MutexLock lock(&mu_);
  if (!status.ok()) {
    ++stats_.failed_calls;
    return FromGrpcStatus(status);
  }
  ++stats_.heartbeats;
  return absl::OkStatus();
}

void ClusterMembership::Learn(const v1::Membership& membership) {
  if (!options_.on_peers || membership.digest() == 0 || membership.digest() == membership_digest_) {
    return;
  }
  membership_digest_ = membership.digest();
  std::vector<std::string> peers;
  for (const v1::PeerMember& member : membership.members()) {
    // One link a pair of members, dialled by the one whose id sorts first (links serve both
    // ways). Two links between the same pair, one of them still wiring up when the peer died,
    // crashed UCX 1.13 in its failure handling.
    if (member.instance_id() <= options_.registration.instance_id() ||
        member.peer_address() == options_.registration.peer_address()) {
      continue;
    }
    peers.push_back(member.peer_address());
  }
  spdlog::info("cluster: the membership names {} peer(s) to dial{}{}", peers.size(),
               peers.empty() ? "" : ": ", fmt::join(peers, ", "));
  {
    absl::MutexLock lock(&mu_);
    ++stats_.membership_updates;
  }
  options_.on_peers(std::move(peers));
}

void ClusterMembership::Deregister() {
  v1::DeregisterInstanceRequest request;
  request.set_instance_id(options_.registration.instance_id());
  {
    absl::MutexLock lock(&mu_);
    if (!stats_.registered) return;
    request.set_lease_id(stats_.lease_id);
  }
  grpc::ClientContext context;
  Prepare(context);
  v1::DeregisterInstanceResponse response;
  const grpc::Status status = stubs_[current_]->DeregisterInstance(&context, request, &response);
  if (!status.ok()) {
    spdlog::warn("cluster: could not deregister from controller {}: {}",
                 options_.controllers[current_], status.error_message());
  }
}

bool ClusterMembership::Wait(std::chrono::milliseconds delay) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(delay));
  return !stopping_;
}

void ClusterMembership::Prepare(grpc::ClientContext& context) const {
  control::AttachBearerToken(context, options_.bearer_token);
  context.set_deadline(std::chrono::system_clock::now() + options_.call_timeout);
}

}  // namespace strata::daemon
