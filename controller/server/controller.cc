#include "controller/server/controller.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/time/time.h"
#include "control/redialing_channel.h"
#include "control/secret_files.h"
#include "core/host_address.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace strata::controller {
namespace {

// Chunks the index's sweep visits per housekeeping tick (a shard or two: about a millisecond).
constexpr uint64_t kSweepChunksPerTick = 100'000;
constexpr std::chrono::milliseconds kDrainGrace{500};

TtftModelOptions ModelOptions(const ControllerConfig::Route& route) {
  TtftModelOptions model;
  model.prefill_s_per_token = route.prefill_us_per_token * 1e-6;
  model.tier_bytes_per_s[static_cast<size_t>(Tier::kHost)] = route.host_bytes_per_s;
  model.tier_bytes_per_s[static_cast<size_t>(Tier::kDisk)] = route.disk_bytes_per_s;
  model.tier_bytes_per_s[static_cast<size_t>(Tier::kRemote)] = route.remote_bytes_per_s;
  return model;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Controller>> Controller::Create(const ControllerConfig& config) {
  std::unique_ptr<Controller> controller(new Controller(config));
  if (!config.cluster.etcd_endpoints.empty()) {
    controller->etcd_ = std::make_shared<EtcdClient>(config.cluster.etcd_endpoints);
    controller->member_store_ = std::make_unique<EtcdMemberStore>(
        EtcdMemberStoreOptions{.etcd = controller->etcd_,
                               .prefix = config.cluster.election_key + "/members/",
                               .election_key = config.cluster.election_key});
  }
  absl::StatusOr<std::unique_ptr<ClusterIndex>> index =
      ClusterIndex::Create({.max_instances = config.controller.max_instances});
  if (!index.ok()) return index.status();
  controller->index_ = *std::move(index);

  std::string daemon_token;
  if (!config.daemons.auth_token_file.empty()) {
    absl::StatusOr<std::string> token =
        control::ReadToken(config.daemons.auth_token_file, "daemons.auth_token_file");
    if (!token.ok()) return token.status();
    daemon_token = *std::move(token);
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> daemon_credentials =
      control::ChannelCredentialsFromFile(config.daemons.tls_ca_path);
  if (!daemon_credentials.ok()) return daemon_credentials.status();

  ClusterIndex* index_ptr = controller->index_.get();
  EventHub* events = controller->events_.get();
  FeedStarter start_feed = [index_ptr, events, daemon_token, credentials = *daemon_credentials,
                            unreachable = config.daemons.unreachable_timeout_ms](
                               const v1::RegisterInstanceRequest& registration) {
    return DaemonFeed::Start(
        {.instance_id = registration.instance_id(),
         .channel = control::CreateRedialingChannel(registration.control_endpoint(), credentials),
         .bearer_token = daemon_token,
         .index = index_ptr,
         .events = events,
         .unreachable_timeout = std::chrono::milliseconds(unreachable)});
  };
  absl::StatusOr<std::unique_ptr<InstanceRegistry>> registry = InstanceRegistry::Create(
      {.start_feed = std::move(start_feed),
       .instance_timeout = std::chrono::milliseconds(config.controller.instance_timeout_ms),
       .heartbeat_interval = std::chrono::milliseconds(HeartbeatIntervalMs(config)),
       .member_store = controller->member_store_.get()});
  if (!registry.ok()) return registry.status();
  controller->registry_ = *std::move(registry);
  controller->forwarder_ =
      std::make_unique<NodeForwarder>(NodeForwarderOptions{.registry = controller->registry_.get(),
                                                           .credentials = *daemon_credentials,
                                                           .bearer_token = daemon_token});

  std::string token;
  if (!config.controller.auth_token_file.empty()) {
    absl::StatusOr<std::string> read =
        control::ReadToken(config.controller.auth_token_file, "controller.auth_token_file");
    if (!read.ok()) return read.status();
    token = *std::move(read);
  }
  absl::StatusOr<HashAlgorithm> algorithm = ParseHashAlgorithm(config.keys.hash_algorithm);
  if (!algorithm.ok()) return algorithm.status();
  controller->key_options_ = {.algorithm = *algorithm, .seed = config.keys.seed};
  controller->service_ = std::make_unique<ClusterService>(
      ClusterServiceOptions{.index = controller->index_.get(),
                            .registry = controller->registry_.get(),
                            .forwarder = controller->forwarder_.get(),
                            .events = events,
                            .bearer_token = std::move(token),
                            .serving = [c = controller.get()] { return c->Serving(); },
                            .completeness = [c = controller.get()] { return c->Completeness(); },
                            .key_options = controller->key_options_,
                            .model = ModelOptions(config.route)});
  return controller;
}

Controller::~Controller() { Stop(); }

absl::Status Controller::StartVllmFeeds() {
  if (config_.vllm.instances.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<VllmInstanceConfig>> instances = VllmInstances(config_.vllm);
  if (!instances.ok()) return instances.status();
  absl::StatusOr<KvLayout> layout = VllmLayout(config_.vllm);
  if (!layout.ok()) return layout.status();
  for (const VllmInstanceConfig& instance : *instances) {
    absl::StatusOr<std::unique_ptr<VllmFeed>> feed = VllmFeed::Start(
        {.instance_id = instance.instance_id,
         .endpoint = instance.endpoint,
         .topic = config_.vllm.topic,
         .layout = *layout,
         .key_options = key_options_,
         .index = index_.get(),
         .events = events_.get(),
         .unreachable_timeout = std::chrono::milliseconds(config_.daemons.unreachable_timeout_ms)});
    if (!feed.ok()) return feed.status();
    vllm_feeds_.push_back(*std::move(feed));
  }
  return absl::OkStatus();
}

absl::Status Controller::Start() {
  if (absl::Status feeds = StartVllmFeeds(); !feeds.ok()) return feeds;
  UpdateCompleteness();  // before the first answer
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      control::ServerCredentialsFromFiles(config_.controller.tls_cert_path,
                                          config_.controller.tls_key_path);
  if (!credentials.ok()) return credentials.status();
  grpc::ServerBuilder builder;
  // A second controller on the same port would otherwise start and take half the calls.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(config_.controller.listen_address, *credentials, &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(fmt::format(
        "cluster API: cannot listen on '{}' (address in use?)", config_.controller.listen_address));
  }
  if (etcd_ != nullptr) {
    member_store_->SetCandidate(AdvertisedAddress());
    absl::StatusOr<std::unique_ptr<LeaderElection>> election =
        LeaderElection::Start({.etcd = etcd_,
                               .key = config_.cluster.election_key,
                               .candidate = AdvertisedAddress(),
                               .lease_ttl_s = config_.cluster.lease_ttl_s,
                               .on_change = [this](bool leading) { OnLeadershipChange(leading); }});
    if (!election.ok()) return election.status();
    election_ = *std::move(election);
  }
  housekeeper_ = std::thread([this] { Housekeep(); });
  spdlog::info("strata-controller {} serving the cluster API on port {} (instance timeout {} ms)",
               STRATA_VERSION, port_, config_.controller.instance_timeout_ms);
  return absl::OkStatus();
}

void Controller::Stop() {
  if (stopped_) return;
  stopped_ = true;
  election_.reset();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (housekeeper_.joinable()) housekeeper_.join();
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + kDrainGrace);
    server_->Wait();
  }
  registry_.reset();
  vllm_feeds_.clear();
}

std::string Controller::AdvertisedAddress() const {
  if (!config_.cluster.advertise_address.empty()) return config_.cluster.advertise_address;
  return DialableAddress(config_.controller.listen_address, port_);
}

void Controller::OnLeadershipChange(bool leading) {
  if (!leading) {
    leading_ = false;
    registry_->DropAll();
    return;
  }
  // Before answering anything: the members the last leader kept, adopted with their leases. The
  // index is incomplete until their snapshots are in (UpdateCompleteness).
  if (absl::StatusOr<std::vector<v1::InstanceRecord>> records = member_store_->Load();
      records.ok()) {
    registry_->Adopt(*records);
  } else {
    spdlog::warn("controller: the predecessor's members are not adopted (they register again): {}",
                 records.status().ToString());
  }
  {
    absl::MutexLock lock(&completeness_mu_);
    leading_since_ = std::chrono::steady_clock::now();
  }
  UpdateCompleteness();
  leading_ = true;
}

IndexCompleteness Controller::Completeness() const {
  if (complete_.load(std::memory_order_acquire)) return {};
  absl::MutexLock lock(&completeness_mu_);
  return {.complete = false, .reason = incomplete_reason_};
}

void Controller::UpdateCompleteness() {
  const size_t registered = registry_->size();
  const size_t following = registry_->following();
  absl::MutexLock lock(&completeness_mu_);
  const auto leading_for = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - leading_since_);
  const std::chrono::milliseconds timeout(config_.controller.instance_timeout_ms);
  std::string reason;
  if (member_store_ == nullptr && leading_for < timeout) {
    // Without etcd nothing says which daemons a predecessor knew: they come back when their
    // heartbeats find no lease here, within the instance timeout.
    reason = fmt::format(
        "this controller started {} ms ago, and daemons re-register within the instance timeout "
        "({} ms); {} of {} registered instances indexed",
        leading_for.count(), timeout.count(), following, registered);
  } else if (following < registered) {
    reason = fmt::format(
        "{} of {} registered instances indexed; the others' snapshots are still "
        "being read",
        following, registered);
  }
  incomplete_reason_ = reason;
  complete_.store(reason.empty(), std::memory_order_release);
}

absl::Status Controller::Serving() const {
  if (leading_.load()) return absl::OkStatus();
  const std::string leader = election_ != nullptr ? election_->state().leader : "";
  return absl::UnavailableError(fmt::format("this strata-controller is a standby; the leader is {}",
                                            leader.empty() ? "not known yet" : leader));
}

void Controller::Housekeep() {
  // Often enough that a silent daemon leaves within a tenth of its timeout of expiring.
  const auto tick = std::chrono::milliseconds(
      std::clamp<uint32_t>(config_.controller.instance_timeout_ms / 10, 1, 250));
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(tick));
      if (stopping_) return;
    }
    registry_->ExpireSilent();
    if (leading_.load()) UpdateCompleteness();
    index_->Sweep(kSweepChunksPerTick);
  }
}

}  // namespace strata::controller
