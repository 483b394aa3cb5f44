// TestDaemon is the remote tier's side of a daemon inside one test process: a TieredStore (a
// host tier, optionally a disk tier and a RemoteTier below it), a RemoteServer answering peers
// (streams included), a PeerSet and a UcxTransport over the host arena, tcp on lo, optionally
// behind a FaultInjectingTransport (what this daemon's own requests go through). Test-only;
// header-only. Not thread-safe except where its parts are.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "fmt/format.h"
#include "gtest/gtest.h"
#include "storage/host/test_util.h"
#include "storage/remote/fault_injecting_transport.h"
#include "storage/remote/peer_set.h"
#include "storage/remote/remote_server.h"
#include "storage/remote/remote_tier.h"
#include "storage/remote/ucx_transport.h"
#include "storage/tiered/tiered_store.h"

namespace strata::storage::remote::testing {

using namespace std::chrono_literals;
using storage::testing::Pattern;
using storage::testing::SyntheticKey;

// 64 tokens of 256 bytes: 16 KiB chunks over 4 KiB pages, so every read is several pieces.
inline std::shared_ptr<const KvLayout> TestLayout() {
  KvLayout layout = storage::testing::SmallLayout("remote-test");
  layout.chunk_tokens = 64;
  return std::make_shared<const KvLayout>(layout);
}

class TestDaemon {
 public:
  struct Options {
    std::string node_id;
    std::vector<std::string> dial;
    bool remote_tier = false;
    bool faulty = false;
    bool disk = false;  // a disk tier under the host tier, served to peers
    std::chrono::microseconds lookup_budget = 2s;
    std::chrono::milliseconds fetch_timeout = 3s;
    std::chrono::milliseconds stream_deadline = 30s;  // of streams this daemon receives
  };

  TestDaemon(Options options, std::shared_ptr<const KvLayout> layout) : layout_(std::move(layout)) {
    TieredStoreOptions store_options;
    store_options.host = {.capacity_bytes = 64 * ChunkBytes(),
                          .page_bytes = 4096,
                          .arena_name = "strata-remote-tier-test"};
    if (options.disk) {
      disk_dir_ = std::filesystem::temp_directory_path() /
                  fmt::format("strata-remote-tier-test-{}-{}", getpid(), options.node_id);
      store_options.disk = TieredDiskOptions{.directory = disk_dir_.string(),
                                             .capacity_bytes = 4ull << 20,
                                             .segment_bytes = 1ull << 20};
    }
    if (options.remote_tier) {
      auto tier = std::make_unique<RemoteTier>(RemoteTierOptions{
          .lookup_budget = options.lookup_budget, .fetch_timeout = options.fetch_timeout});
      remote_ = tier.get();
      store_options.lower.push_back(std::move(tier));
    }
    auto store = TieredStore::Create(std::move(store_options));
    EXPECT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    RemoteServerOptions server_options;
    server_options.streams.deadline = options.stream_deadline;
    server_ =
        std::make_unique<RemoteServer>(store_->host(), ServingBelowHost(*store_, server_options));

    PeerSetOptions peer_options;
    peer_options.node_id = options.node_id;
    peer_options.layouts = {layout_->Fingerprint()};
    peer_options.peers = options.dial;
    peer_options.redial_min = 20ms;
    peer_options.on_call = [this](PeerId peer, std::string request, Transport::Reply reply) {
      server_->Handle(peer, std::move(request), std::move(reply));
    };
    peer_options.on_peer_down = [this](PeerId peer) { server_->PeerDown(peer); };
    peers_ = std::make_unique<PeerSet>(std::move(peer_options));

    UcxTransportOptions transport_options;
    transport_options.region = arena();
    transport_options.cluster_secret = "token";
    transport_options.listen_address = "127.0.0.1:0";
    transport_options.transports = "tcp";
    transport_options.net_devices = "lo";
    transport_options.handlers = peers_->TransportHandlers();
    auto transport = UcxTransport::Create(std::move(transport_options));
    EXPECT_TRUE(transport.ok()) << transport.status();
    transport_ = std::move(*transport);
    Transport* used = transport_.get();
    if (options.faulty) {
      faults_ = std::make_unique<FaultInjectingTransport>(*transport_);
      used = faults_.get();
    }
    used_ = used;
    server_->Attach(used);
    peers_->Start(used);
    if (remote_ != nullptr) remote_->Attach(used, peers_.get(), store_->host().arena_pages());
  }

  ~TestDaemon() {
    store_->Stop();
    peers_->Stop();
    server_->Detach();
    faults_.reset();
    transport_.reset();
    peers_.reset();
    server_.reset();
    store_.reset();
    if (!disk_dir_.empty()) std::filesystem::remove_all(disk_dir_);
  }

  std::span<std::byte> arena() {
    return {store_->host().arena_base(), store_->host().arena_size_bytes()};
  }
  uint64_t ChunkBytes() const { return layout_->chunk_bytes(layout_->chunk_tokens); }
  std::string address() const { return transport_->listen_address(); }

  ChunkKey Key(uint64_t id) const { return SyntheticKey(*layout_, id); }
  std::vector<ChunkKey> Chain(uint64_t count) const {
    std::vector<ChunkKey> chain;
    for (uint64_t id = 0; id < count; ++id) chain.push_back(Key(id));
    return chain;
  }

  void Store(uint64_t id) {
    auto reserved = store_->host().Reserve(*layout_, Key(id), {.num_tokens = 64});
    ASSERT_TRUE(reserved.ok()) << reserved.status();
    reserved->reservation.payload().CopyFrom(Pattern(id, ChunkBytes()));
    ASSERT_TRUE(store_->host().Commit(std::move(reserved->reservation)).ok());
  }

  // Query's answer, waited for.
  size_t Query(std::vector<ChunkKey> chain) {
    absl::Notification done;
    size_t held = 0;
    remote_->Query(std::move(chain), [&](size_t prefix) {
      held = prefix;
      done.Notify();
    });
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
    return held;
  }

  // A load of `chain` through the store, waited for.
  LoadLeases Load(std::vector<ChunkKey> chain) {
    absl::Notification done;
    LoadLeases result;
    std::optional<LoadLeases> now =
        store_->AcquireForLoad(layout_, std::move(chain), {.owner = 7}, [&](LoadLeases leases) {
          result = std::move(leases);
          done.Notify();
        });
    if (now.has_value()) return std::move(*now);
    EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
    return result;
  }

  bool Holds(const ChunkLease& lease, uint64_t id) const {
    std::vector<std::byte> bytes(lease.size_bytes());
    lease.payload().CopyTo(bytes);
    return bytes == Pattern(id, ChunkBytes());
  }

  // Waits until this daemon has admitted a peer serving the layout.
  bool PeerUp() {
    for (int i = 0; i < 1000; ++i) {
      if (!peers_->PeersServing(layout_->Fingerprint()).empty()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  TieredStore& store() { return *store_; }
  RemoteTier& remote() { return *remote_; }
  RemoteServer& server() { return *server_; }
  FaultInjectingTransport& faults() { return *faults_; }
  // The transport this daemon's own requests go through (the fault injector when faulty).
  Transport& transport() { return *used_; }
  // The admitted link to the peer named `name`, waited for up to 10 s.
  std::optional<PeerId> WaitForPeer(std::string_view name) {
    for (int i = 0; i < 1000; ++i) {
      if (std::optional<PeerId> peer = peers_->FindAdmitted(name)) return peer;
      std::this_thread::sleep_for(10ms);
    }
    return std::nullopt;
  }

 private:
  std::shared_ptr<const KvLayout> layout_;
  std::unique_ptr<TieredStore> store_;
  RemoteTier* remote_ = nullptr;
  std::unique_ptr<RemoteServer> server_;
  std::unique_ptr<PeerSet> peers_;
  std::unique_ptr<UcxTransport> transport_;
  std::unique_ptr<FaultInjectingTransport> faults_;
  Transport* used_ = nullptr;
  std::filesystem::path disk_dir_;
};

}  // namespace strata::storage::remote::testing
