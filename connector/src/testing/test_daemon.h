// TestDaemon runs the daemon's real engine-session server (daemon/EngineSessionServer) over a
// small host tier (optionally over a disk tier) in this process, on a fresh socket under a temp
// directory, for connector tests. It can be stopped and started again on the same socket path (the
// daemon going away and coming back). Not thread-safe: one test thread drives it; the server runs
// its own thread.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/clock.h"
#include "daemon/engine_session_server.h"
#include "storage/device/device_pools.h"
#include "storage/device/host_runtime.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/device_pool_tiering.h"
#include "storage/tiered/tiered_store.h"

namespace strata::connector::testing {

struct TestDaemonOptions {
  uint64_t capacity_bytes = 64ull << 20;
  uint32_t page_bytes = 4096;
  std::chrono::nanoseconds default_lease = std::chrono::seconds(30);
  // The tier's checksum verification on lease (HostTierOptions::verify_every_n_loads).
  uint32_t verify_every_n_loads = 1;
  // Tier clock (lease deadlines); null: the system clock. Not owned.
  Clock* clock = nullptr;
  // Told about the tier's index changes; nullable; not owned.
  storage::ChunkObserver* observer = nullptr;
  // The daemon asks for stored chunks' token ids (it publishes KV events).
  bool kv_event_token_ids = false;
  // Eviction policy (HostTierOptions::policy); empty: the tier's default.
  std::string policy;
  // A disk tier of this many bytes under dir()/disk (0: none): the host tier demotes what it
  // evicts to it (synchronously), loads promote from it (asynchronously: the store's thread),
  // and Prefetch requests are served.
  uint64_t disk_capacity_bytes = 0;
  uint64_t disk_segment_bytes = 1ull << 20;
  // The node among its peers (disaggregated prefill): its id and address, and the node ids it
  // admits as peers. Empty node_id: no remote tier.
  std::string node_id;
  std::string remote_address = "127.0.0.1:7100";
  std::vector<std::string> admitted_peers;
  // A device pool (T0) of this many bytes per layout on a HostRuntime (memfd "device" memory),
  // in pages of device_pool_block_tokens tokens, demoting to the host tier and promoted from it
  // (DevicePoolTiering); 0: none.
  uint64_t device_pool_bytes = 0;
  uint32_t device_pool_block_tokens = 16;
  // DevicePoolTieringOptions::demote_ahead (off: tests see demotions at eviction only).
  bool device_pool_demote_ahead = false;
};

class TestDaemon {
 public:
  // Serves `socket_path`, or a socket in a fresh temp directory (removed on destruction) when
  // it is empty.
  explicit TestDaemon(TestDaemonOptions options = {}, std::string socket_path = "")
      : options_(options) {
    if (socket_path.empty()) {
      static std::atomic<int> counter{0};
      dir_ = std::filesystem::temp_directory_path() /
             ("strata-conn-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
      std::filesystem::create_directories(dir_);
      owns_dir_ = true;
      socket_path_ = (dir_ / "engine.sock").string();
    } else {
      socket_path_ = std::move(socket_path);
      dir_ = std::filesystem::path(socket_path_).parent_path();
    }
  }
  ~TestDaemon() {
    Stop();
    DropDevicePools();
    if (owns_dir_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }

  // Starts the server; new tiers unless `keep_tier` and they exist (a new disk tier reopens
  // dir()/disk and recovers what it held).
  absl::Status Start(bool keep_tier = false) {
    if (!keep_tier || store_ == nullptr) {
      server_.reset();
      DropDevicePools();
      store_.reset();
      storage::TieredStoreOptions options;
      options.host.capacity_bytes = options_.capacity_bytes;
      options.host.page_bytes = options_.page_bytes;
      options.host.default_lease = options_.default_lease;
      options.host.verify_every_n_loads = options_.verify_every_n_loads;
      if (options_.clock != nullptr) options.host.clock = options_.clock;
      options.host.observer = options_.observer;
      if (!options_.policy.empty()) options.host.policy = options_.policy;
      if (options_.disk_capacity_bytes > 0) {
        options.disk = storage::TieredDiskOptions{.directory = (dir_ / "disk").string(),
                                                  .capacity_bytes = options_.disk_capacity_bytes,
                                                  .segment_bytes = options_.disk_segment_bytes};
        options.movement.demotion_queue_bytes = 0;
      }
      auto store = storage::TieredStore::Create(std::move(options));
      if (!store.ok()) return store.status();
      store_ = std::move(*store);
      if (options_.device_pool_bytes > 0) {
        device_pool_tiering_ = std::make_unique<storage::DevicePoolTiering>(
            store_->host(), device_runtime_,
            storage::DevicePoolTieringOptions{.block_tokens = options_.device_pool_block_tokens,
                                              .demote_ahead = options_.device_pool_demote_ahead});
        device_pools_ = std::make_unique<storage::DevicePools>(
            device_runtime_, storage::DevicePoolsOptions{
                                 .bytes_per_layout = options_.device_pool_bytes,
                                 .block_tokens = options_.device_pool_block_tokens,
                                 .on_evict = device_pool_tiering_->DemoteOnEvict(),
                                 .on_evictable = device_pool_tiering_->DemoteAheadOnEvictable()});
      }
    }
    daemon::NodeIdentity node;
    if (!options_.node_id.empty()) {
      node = {.node_id = options_.node_id,
              .remote_address = options_.remote_address,
              .is_admitted_peer = [peers = options_.admitted_peers](std::string_view name) {
                return std::find(peers.begin(), peers.end(), name) != peers.end();
              }};
    }
    auto server =
        daemon::EngineSessionServer::Create({.socket_path = socket_path_,
                                             .store = store_.get(),
                                             .lookups = &lookups_,
                                             .kv_event_token_ids = options_.kv_event_token_ids,
                                             .node = std::move(node),
                                             .device_pools = device_pools_.get(),
                                             .device_pool_tiering = device_pool_tiering_.get()});
    if (!server.ok()) return server.status();
    server_ = std::move(*server);
    server_->Start();
    return absl::OkStatus();
  }

  // Stops the server: every session ends (the tier keeps its chunks).
  void Stop() {
    if (server_ != nullptr) {
      server_->Stop();
      server_.reset();
    }
  }

  const std::string& socket_path() const { return socket_path_; }
  const std::filesystem::path& dir() const { return dir_; }
  storage::HostTier* tier() const { return &store_->host(); }
  storage::TieredStore* store() const { return store_.get(); }
  // The device pools (null without device_pool_bytes).
  storage::DevicePools* device_pools() const { return device_pools_.get(); }
  daemon::EngineSessionServer* server() const { return server_.get(); }
  // The engines' lookups, counted as stratad counts them.
  const daemon::LookupAccounting& lookups() const { return lookups_; }

 private:
  // The tiering's demotions stop before the pools go, and both go before the store they use.
  void DropDevicePools() {
    if (device_pool_tiering_) device_pool_tiering_->Stop();
    device_pools_.reset();
    device_pool_tiering_.reset();
  }

  const TestDaemonOptions options_;
  std::filesystem::path dir_;
  bool owns_dir_ = false;
  std::string socket_path_;
  daemon::LookupAccounting lookups_;
  // The store outlives the server, which posts loads to it.
  std::unique_ptr<storage::TieredStore> store_;
  storage::HostRuntime device_runtime_;
  std::unique_ptr<storage::DevicePoolTiering> device_pool_tiering_;
  std::unique_ptr<storage::DevicePools> device_pools_;
  std::unique_ptr<daemon::EngineSessionServer> server_;
};

}  // namespace strata::connector::testing
