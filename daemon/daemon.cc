#include "daemon/daemon.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <span>
#include <string>

#include "control/secret_files.h"
#include "core/fmt_absl.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "spdlog/spdlog.h"
#include "storage/device/device_runtime_factory.h"

namespace strata::daemon {
namespace {

constexpr std::chrono::milliseconds kControlDrainGrace{500};

// A tier's [*.tenant_codecs] as the store takes them.
std::map<std::string, storage::TieredDiskOptions::TenantCodec> StoreTenantCodecs(
    const std::map<std::string, DaemonConfig::TenantCodec>& tenants) {
  std::map<std::string, storage::TieredDiskOptions::TenantCodec> store;
  for (const auto& [tenant, choice] : tenants) {
    store[tenant] = {.codec = choice.codec,
                     .params = {.group_size = choice.group_size,
                                .bits = choice.bits,
                                .energy = static_cast<float>(choice.energy)}};
  }
  return store;
}

// The device pool's runtime. "auto" asks for CUDA and, when no GPU is usable, fails start-up
// (saying why and what to set) unless the configuration allows pooling host memory instead.
absl::StatusOr<std::unique_ptr<storage::DeviceRuntime>> CreatePoolRuntime(
    storage::DeviceBackend backend, const DaemonConfig::DevicePool& pool) {
  const int device = static_cast<int>(pool.device);
  if (backend != storage::DeviceBackend::kAuto) {
    auto runtime = storage::CreateDeviceRuntime({.backend = backend, .device_ordinal = device});
    if (!runtime.ok()) return Annotate(runtime.status(), "device pool");
    return runtime;
  }
  absl::StatusOr<std::unique_ptr<storage::DeviceRuntime>> cuda = storage::CreateDeviceRuntime(
      {.backend = storage::DeviceBackend::kCuda, .device_ordinal = device});
  if (cuda.ok()) return cuda;
  if (!pool.allow_host_fallback) {
    return absl::FailedPreconditionError(fmt::format(
        "device pool: backend \"auto\" found no usable GPU ({}); give the daemon the GPU (the "
        "GPU variants of deploy/'s unit and DaemonSet), or set [device_pool] backend = \"host\" "
        "to pool host memory on purpose, or allow_host_fallback = true",
        cuda.status().message()));
  }
  spdlog::warn("device pool: no usable GPU ({}); pooling host memory (allow_host_fallback)",
               cuda.status().message());
  return storage::CreateDeviceRuntime({.backend = storage::DeviceBackend::kHost});
}

}  // namespace

Daemon::Daemon(DaemonConfig config)
    : config_(std::move(config)), registry_(std::make_shared<prometheus::Registry>()) {}

Daemon::~Daemon() { Stop(); }

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(const DaemonConfig& config) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  std::unique_ptr<Daemon> daemon(new Daemon(config));

  daemon->event_log_ = std::make_unique<EventLog>(config.control.event_ring_capacity);
  if (!config.events.zmq_endpoint.empty()) {
    absl::StatusOr<std::unique_ptr<VllmEventPublisher>> publisher = VllmEventPublisher::Create(
        config.events.zmq_endpoint, config.events.zmq_topic, daemon->event_log_.get());
    if (!publisher.ok()) return publisher.status();
    daemon->kv_publisher_ = *std::move(publisher);
    spdlog::info("kv events on {} (topic '{}')", daemon->kv_publisher_->endpoint(),
                 config.events.zmq_topic);
  }
  storage::TieredStoreOptions store;
  storage::HostTierOptions& host = store.host;
  host.capacity_bytes = config.host.capacity_bytes;
  host.page_bytes = config.host.page_bytes;
  host.use_hugepages = config.host.use_hugepages;
  host.prefault = config.host.prefault;
  host.hard_pin_quota_bytes =
      config.host.hard_pin_quota_bytes.value_or(config.host.capacity_bytes / 2);
  host.default_lease = std::chrono::milliseconds(config.host.lease_ms);
  host.verify_every_n_loads = config.host.verify_every_n_loads;
  host.policy = config.host.policy;
  host.tenant_quotas = config.host.tenant_quotas;
  host.observer = daemon->event_log_->observer(storage::Tier::kHost);
  store.host_codec = {.codec = config.host.codec,
                      .params = {.group_size = config.host.codec_group_size,
                                 .bits = config.host.codec_bits,
                                 .energy = static_cast<float>(config.host.codec_energy)},
                      .tenant_codecs = StoreTenantCodecs(config.host.tenant_codecs),
                      .recode_threads = config.host.codec_threads};
  if (!config.disk.directory.empty()) {
    store.disk = storage::TieredDiskOptions{
        .directory = config.disk.directory,
        .capacity_bytes = config.disk.capacity_bytes,
        .segment_bytes = config.disk.segment_bytes,
        .observer = daemon->event_log_->observer(storage::Tier::kDisk),
        .codec = config.disk.codec,
        .codec_params = {.group_size = config.disk.codec_group_size,
                         .bits = config.disk.codec_bits,
                         .energy = static_cast<float>(config.disk.codec_energy)},
        .codec_threads = config.disk.codec_threads};
    store.disk->tenant_codecs = StoreTenantCodecs(config.disk.tenant_codecs);
    store.movement = {.demotion_queue_bytes = config.disk.demotion_queue_bytes,
                      .write_through = config.disk.write_through,
                      .prefetch_queue_chunks = config.disk.prefetch_queue_chunks,
                      // Registering pins (so allocates) every page: only a prefaulted arena.
                      .register_arena = config.host.prefault};
    if (!config.host.prefault) {
      spdlog::info("disk tier: host arena not registered with the io engines (host.prefault off)");
    }
  }
  const bool remote = !config.remote.listen_address.empty();
  std::string cluster_token;
  if (remote) {
    absl::StatusOr<std::string> read =
        control::ReadToken(config.remote.cluster_token_file, "cluster token file");
    if (!read.ok()) return read.status();
    cluster_token = *std::move(read);
    auto& fetches = prometheus::BuildHistogram()
                        .Name("strata_remote_fetch_seconds")
                        .Help(
                            "Fetches of chunks from one peer (lease, reads, checksums), by "
                            "result (failed: some chunk did not arrive whole).")
                        .Register(*daemon->registry_);
    prometheus::Histogram* fetched = &fetches.Add({{"result", "ok"}}, TransferBuckets());
    prometheus::Histogram* failed = &fetches.Add({{"result", "failed"}}, TransferBuckets());
    auto tier = std::make_unique<storage::remote::RemoteTier>(storage::remote::RemoteTierOptions{
        .lookup_budget = std::chrono::microseconds(config.remote.lookup_budget_us),
        .fetch_timeout = std::chrono::milliseconds(config.remote.fetch_timeout_ms),
        .on_fetch = [fetched, failed](std::chrono::nanoseconds took, bool ok) {
          (ok ? fetched : failed)->Observe(std::chrono::duration<double>(took).count());
        }});
    daemon->remote_tier_ = tier.get();
    store.lower.push_back(std::move(tier));
  }
  absl::StatusOr<std::unique_ptr<storage::TieredStore>> tiers =
      storage::TieredStore::Create(std::move(store));
  if (!tiers.ok()) return tiers.status();
  daemon->store_ = *std::move(tiers);
  if (config.host.background_prefault && !config.host.prefault) {
    daemon->arena_prefault_ = std::make_unique<BackgroundPrefault>(
        daemon->store_->host().arena_pages(), BackgroundPrefault::Mode::kAllocate);
  }
  if (remote) {
    absl::StatusOr<std::unique_ptr<storage::remote::RemoteNode>> node =
        storage::remote::RemoteNode::Create(
            {.listen_address = config.remote.listen_address,
             .peers = config.remote.peers,
             .cluster_token = cluster_token,
             .node_id = config.remote.node_id,
             .transports = config.remote.transports,
             .net_devices = config.remote.net_devices,
             .stream_deadline = std::chrono::milliseconds(config.remote.pd_deadline_ms),
             .read_window_bytes = config.remote.read_window_bytes},
            *daemon->store_, daemon->remote_tier_);
    if (!node.ok()) return node.status();
    daemon->remote_ = *std::move(node);
    spdlog::info("remote tier: peers reach this node ({}) on {}; dialling {} peer(s)",
                 daemon->remote_->node_id(), daemon->remote_->listen_address(),
                 config.remote.peers.size());
  }
  if (!config.disk.directory.empty()) {
    spdlog::info("disk tier: {} ({} chunks recovered{})", config.disk.directory,
                 daemon->store_->Stats().lower.front().chunks,
                 config.disk.write_through ? ", write-through" : "");
  }

  if (config.device_pool.bytes_per_layout > 0) {
    absl::StatusOr<storage::DeviceBackend> backend =
        storage::ParseDeviceBackend(config.device_pool.backend);
    if (!backend.ok()) return backend.status();
    absl::StatusOr<std::unique_ptr<storage::DeviceRuntime>> runtime =
        CreatePoolRuntime(*backend, config.device_pool);
    if (!runtime.ok()) return runtime.status();
    daemon->device_runtime_ = *std::move(runtime);
    daemon->device_pool_tiering_ = std::make_unique<storage::DevicePoolTiering>(
        daemon->store_->host(), *daemon->device_runtime_,
        storage::DevicePoolTieringOptions{.block_tokens = config.device_pool.block_tokens,
                                          .demote_ahead = config.device_pool.demote_ahead});
    daemon->device_pools_ = std::make_unique<storage::DevicePools>(
        *daemon->device_runtime_,
        storage::DevicePoolsOptions{
            .bytes_per_layout = config.device_pool.bytes_per_layout,
            .block_tokens = config.device_pool.block_tokens,
            .on_evict = daemon->device_pool_tiering_->DemoteOnEvict(),
            .on_evictable = daemon->device_pool_tiering_->DemoteAheadOnEvictable()});
    spdlog::info(
        "device pool: {} bytes per layout in {} memory ({}), pages of {} tokens",
        config.device_pool.bytes_per_layout, daemon->device_runtime_->Capabilities().backend,
        daemon->device_runtime_->Capabilities().device_name, config.device_pool.block_tokens);
  }

  EngineSessionServerOptions sessions;
  sessions.socket_path = config.engine.socket_path;
  sessions.device_pools = daemon->device_pools_.get();
  sessions.device_pool_tiering = daemon->device_pool_tiering_.get();
  sessions.store = daemon->store_.get();
  sessions.lookups = daemon->lookups_.get();
  sessions.kv_event_token_ids = daemon->kv_publisher_ != nullptr;
  sessions.max_sessions = config.engine.max_sessions;
  sessions.allowed_uids = config.engine.allowed_uids;
  sessions.registry = daemon->registry_.get();
  if (daemon->remote_ != nullptr) {
    storage::remote::RemoteNode* node = daemon->remote_.get();
    sessions.node = {
        .node_id = node->node_id(),
        .remote_address = node->listen_address(),
        .is_admitted_peer = [node](std::string_view name) { return node->HasAdmittedPeer(name); },
        .source_lookup_budget = std::chrono::milliseconds(config.remote.pd_lookup_budget_ms),
        .remote = node};
  }
  absl::StatusOr<std::unique_ptr<EngineSessionServer>> server =
      EngineSessionServer::Create(std::move(sessions));
  if (!server.ok()) return Annotate(server.status(), "engine session server");
  daemon->sessions_ = std::move(*server);

  absl::StatusOr<HashAlgorithm> algorithm = ParseHashAlgorithm(config.keys.hash_algorithm);
  if (!algorithm.ok()) return algorithm.status();
  std::string token;
  if (!config.control.auth_token_file.empty()) {
    absl::StatusOr<std::string> read =
        control::ReadToken(config.control.auth_token_file, "token file");
    if (!read.ok()) return read.status();
    token = *std::move(read);
  }
  daemon->control_service_ = std::make_unique<ControlService>(
      ControlServiceOptions{.store = daemon->store_.get(),
                            .sessions = daemon->sessions_.get(),
                            .events = daemon->event_log_.get(),
                            .key_options = {.algorithm = *algorithm, .seed = config.keys.seed},
                            .bearer_token = token,
                            .registry = daemon->registry_.get(),
                            .lookups = daemon->lookups_.get(),
                            .remote = daemon->remote_.get()});
  const EngineSessionServer* sessions_ptr = daemon->sessions_.get();
  daemon->node_metrics_ = std::make_shared<NodeCollector>(NodeSources{
      .store = daemon->store_.get(),
      .sessions =
          [sessions_ptr] {
            const EngineSessionStats stats = sessions_ptr->Stats();
            return std::pair<uint64_t, uint64_t>(stats.active_sessions, stats.total_sessions);
          },
      .lookups = daemon->lookups_.get(),
      .remote = daemon->remote_.get(),
      .device_pools = daemon->device_pools_.get(),
      .device_pool_tiering = daemon->device_pool_tiering_.get(),
  });
  return daemon;
}

absl::Status Daemon::Start() {
  grpc::ServerBuilder builder;
  // gRPC binds with SO_REUSEPORT by default: a second daemon on the same control port would
  // start and take half of the first one's calls. Refuse it instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (!config_.control.listen_address.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        control::ServerCredentialsFromFiles(config_.control.tls_cert_path,
                                            config_.control.tls_key_path);
    if (!credentials.ok()) return credentials.status();
    builder.AddListeningPort(config_.control.listen_address, *credentials, &control_port_);
  }
  const std::string& unix_path = config_.control.unix_socket_path;
  if (!unix_path.empty()) {
    std::error_code ec;
    const std::filesystem::path path(unix_path);
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    std::filesystem::remove(path, ec);
    builder.AddListeningPort("unix:" + unix_path, grpc::InsecureServerCredentials());
  }
  builder.RegisterService(control_service_.get());
  control_server_ = builder.BuildAndStart();
  if (control_server_ == nullptr ||
      (!config_.control.listen_address.empty() && control_port_ == 0)) {
    return absl::UnavailableError(
        fmt::format("gRPC control server: cannot listen on '{}' / 'unix:{}' (address in use?)",
                    config_.control.listen_address, unix_path));
  }
  if (!config_.metrics.listen_address.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsExposer>> exposer =
        MetricsExposer::Create(config_.metrics.listen_address, {registry_, node_metrics_});
    if (exposer.ok()) {
      metrics_exposer_ = *std::move(exposer);
      spdlog::info(
          "metrics on {}:{}/metrics",
          config_.metrics.listen_address.substr(0, config_.metrics.listen_address.rfind(':')),
          metrics_exposer_->port());
    } else if (config_.metrics.listen_address == kDefaultMetricsAddress) {
      // The default address, taken (another daemon or exporter on this host): metrics are not
      // worth refusing to serve engines for.
      spdlog::warn("no metrics: {} ([metrics] listen_address or --metrics-listen picks another)",
                   exposer.status().message());
    } else {
      return exposer.status();
    }
  }
  sessions_->Start();
  if (!config_.cluster.controllers.empty()) {
    ClusterMembershipOptions membership{.controllers = config_.cluster.controllers};
    membership.registration = BuildRegistration(
        config_, control_port_, remote_ ? remote_->node_id() : std::string(), remote_address());
    if (!config_.cluster.token_file.empty()) {
      absl::StatusOr<std::string> token =
          control::ReadToken(config_.cluster.token_file, "cluster.token_file");
      if (!token.ok()) return token.status();
      membership.bearer_token = *std::move(token);
    }
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        control::ChannelCredentialsFromFile(config_.cluster.tls_ca_path);
    if (!credentials.ok()) return credentials.status();
    membership.credentials = *std::move(credentials);
    if (remote_) {
      // The membership is stopped before the remote node (Stop).
      membership.on_peers = [remote = remote_.get()](std::vector<std::string> peers) {
        remote->SetClusterPeers(std::move(peers));
      };
    }
    absl::StatusOr<std::unique_ptr<ClusterMembership>> started =
        ClusterMembership::Start(std::move(membership));
    if (!started.ok()) return started.status();
    membership_ = *std::move(started);
  }
  spdlog::info("stratad {} serving: engines on {}, control on {}{}{}, host tier {} MiB",
               STRATA_VERSION, config_.engine.socket_path,
               config_.control.listen_address.empty() ? std::string("-")
                                                      : fmt::format("127.0.0.1:{}", control_port_),
               unix_path.empty() ? "" : " and unix:", unix_path,
               store_->host().arena_size_bytes() >> 20);
  return absl::OkStatus();
}

void Daemon::Stop() {
  if (stopped_) return;
  stopped_ = true;
  membership_.reset();
  if (control_service_) control_service_->SetDraining();
  if (control_server_) {
    // In-flight control calls are short (in-memory); idle client channels would otherwise hold
    // the shutdown for its whole deadline.
    const auto grace =
        std::min(std::chrono::milliseconds(config_.drain_timeout_ms / 2), kControlDrainGrace);
    control_server_->Shutdown(std::chrono::system_clock::now() + grace);
    control_server_->Wait();
  }
  if (sessions_) sessions_->Stop();
  // No session uses the device pools now; demotions ahead stop before the pools go.
  if (device_pool_tiering_) device_pool_tiering_->Stop();
  // Loads in flight finish (their sessions are gone: their leases are released), queued
  // demotions reach the disk; the store stays until the members go.
  if (store_) store_->Stop();
  // No load or lookup reaches the remote tier now: its links can close.
  if (remote_) remote_->Stop();
  if (!config_.control.unix_socket_path.empty()) {
    std::error_code ec;
    std::filesystem::remove(config_.control.unix_socket_path, ec);
  }
  if (store_) {
    const storage::HostTierStats stats = store_->host().Stats();
    spdlog::info("stratad stopped: {} chunks ({} MiB) in the host tier were dropped", stats.chunks,
                 stats.payload_bytes >> 20);
  }
}

}  // namespace strata::daemon
