// TestDaemon runs the daemon's real engine-session server (daemon/EngineSessionServer) over a
// small host tier (optionally over a disk tier) in this process, on a fresh socket under a temp
// directory, for connector tests. It can be stopped and started again on the same socket path (the
// daemon going away and coming back). Not thread-safe: one test thread drives it; the server runs
// its own thread.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/clock.h"
#include "daemon/engine_session_server.h"
#include "storage/disk/disk_tier.h"
#include "storage/disk/mover.h"
#include "storage/disk/promoter.h"
#include "storage/host/host_tier.h"

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
  // evicts to it (synchronously), loads promote from it, and Prefetch requests are served.
  uint64_t disk_capacity_bytes = 0;
  uint64_t disk_segment_bytes = 1ull << 20;
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
    if (owns_dir_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }

  // Starts the server; new tiers unless `keep_tier` and they exist (a new disk tier reopens
  // dir()/disk and recovers what it held).
  absl::Status Start(bool keep_tier = false) {
    if (!keep_tier || tier_ == nullptr) {
      server_.reset();
      promoter_.reset();
      tier_.reset();
      mover_.reset();
      disk_.reset();
      if (options_.disk_capacity_bytes > 0) {
        auto disk = storage::DiskTier::Open({.directory = (dir_ / "disk").string(),
                                             .capacity_bytes = options_.disk_capacity_bytes,
                                             .segment_bytes = options_.disk_segment_bytes});
        if (!disk.ok()) return disk.status();
        disk_ = std::move(*disk);
        auto mover = storage::DiskMover::Create(disk_.get(), {.max_queued_bytes = 0});
        if (!mover.ok()) return mover.status();
        mover_ = std::move(*mover);
      }
      storage::HostTierOptions options;
      options.capacity_bytes = options_.capacity_bytes;
      options.page_bytes = options_.page_bytes;
      options.default_lease = options_.default_lease;
      options.verify_every_n_loads = options_.verify_every_n_loads;
      if (options_.clock != nullptr) options.clock = options_.clock;
      options.observer = options_.observer;
      options.listener = mover_.get();
      if (!options_.policy.empty()) options.policy = options_.policy;
      auto tier = storage::HostTier::Create(options);
      if (!tier.ok()) return tier.status();
      tier_ = std::move(*tier);
      if (disk_ != nullptr) {
        auto promoter = storage::DiskPromoter::Create(disk_.get(), tier_.get(), {});
        if (!promoter.ok()) return promoter.status();
        promoter_ = std::move(*promoter);
      }
    }
    auto server =
        daemon::EngineSessionServer::Create({.socket_path = socket_path_,
                                             .host_tier = tier_.get(),
                                             .disk_tier = disk_.get(),
                                             .promoter = promoter_.get(),
                                             .kv_event_token_ids = options_.kv_event_token_ids});
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
  storage::HostTier* tier() const { return tier_.get(); }
  storage::DiskTier* disk() const { return disk_.get(); }
  storage::DiskPromoter* promoter() const { return promoter_.get(); }
  daemon::EngineSessionServer* server() const { return server_.get(); }

 private:
  const TestDaemonOptions options_;
  std::filesystem::path dir_;
  bool owns_dir_ = false;
  std::string socket_path_;
  // In dependency order: each outlives the ones after it.
  std::unique_ptr<storage::DiskTier> disk_;
  std::unique_ptr<storage::DiskMover> mover_;
  std::unique_ptr<storage::HostTier> tier_;
  std::unique_ptr<storage::DiskPromoter> promoter_;
  std::unique_ptr<daemon::EngineSessionServer> server_;
};

}  // namespace strata::connector::testing
