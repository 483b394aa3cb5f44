#include "controller/server/controller.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/time/time.h"
#include "control/secret_files.h"
#include "core/key_hasher.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"

namespace strata::controller {
namespace {

// Chunks the index's sweep visits per housekeeping tick (a shard or two: about a millisecond).
constexpr uint64_t kSweepChunksPerTick = 100'000;
// A daemon that was down is dialled again within this long of its return, rather than after
// gRPC's default reconnect backoff (up to two minutes).
constexpr int kMaxReconnectBackoffMs = 1'000;
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
  FeedStarter start_feed = [index_ptr, daemon_token, credentials = *daemon_credentials,
                            unreachable = config.daemons.unreachable_timeout_ms](
                               const v1::RegisterInstanceRequest& registration) {
    grpc::ChannelArguments arguments;
    arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs);
    arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, kMaxReconnectBackoffMs / 4);
    return DaemonFeed::Start({.instance_id = registration.instance_id(),
                              .channel = grpc::CreateCustomChannel(registration.control_endpoint(),
                                                                   credentials, arguments),
                              .bearer_token = daemon_token,
                              .index = index_ptr,
                              .unreachable_timeout = std::chrono::milliseconds(unreachable)});
  };
  absl::StatusOr<std::unique_ptr<InstanceRegistry>> registry = InstanceRegistry::Create(
      {.start_feed = std::move(start_feed),
       .instance_timeout = std::chrono::milliseconds(config.controller.instance_timeout_ms),
       .heartbeat_interval = std::chrono::milliseconds(HeartbeatIntervalMs(config))});
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
  controller->service_ = std::make_unique<ClusterService>(
      ClusterServiceOptions{.index = controller->index_.get(),
                            .registry = controller->registry_.get(),
                            .forwarder = controller->forwarder_.get(),
                            .bearer_token = std::move(token),
                            .serving = [c = controller.get()] { return c->Serving(); },
                            .key_options = {.algorithm = *algorithm, .seed = config.keys.seed},
                            .model = ModelOptions(config.route)});
  return controller;
}

Controller::~Controller() { Stop(); }

absl::Status Controller::Start() {
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
  if (!config_.cluster.etcd_endpoints.empty()) {
    absl::StatusOr<std::unique_ptr<LeaderElection>> election =
        LeaderElection::Start({.endpoints = config_.cluster.etcd_endpoints,
                               .key = config_.cluster.election_key,
                               .candidate = AdvertisedAddress(),
                               .lease_ttl_s = config_.cluster.lease_ttl_s,
                               .on_change = [this](bool leading) {
                                 leading_ = leading;
                                 if (!leading) registry_->DropAll();
                               }});
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
}

std::string Controller::AdvertisedAddress() const {
  if (!config_.cluster.advertise_address.empty()) return config_.cluster.advertise_address;
  const std::string& listen = config_.controller.listen_address;
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") {
    char name[256] = {};
    ::gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return fmt::format("{}:{}", host, port_);
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
    index_->Sweep(kSweepChunksPerTick);
  }
}

}  // namespace strata::controller
