// RemoteNode is a daemon's side of the cluster, in one piece: the UcxTransport over the host
// arena (listening for peers), the PeerSet that dials, admits and health-checks them, the
// RemoteServer that answers their remote-tier messages from this node's host tier (and its disk
// tier, through the store), and the
// RemoteTier (registered with the TieredStore by the caller) attached to both. The daemon
// creates it from its [remote] configuration once the store exists.
//
// Lifecycle: Create after TieredStore::Create (the store owns `tier`); Stop after the store has
// stopped (no load or lookup may reach the tier afterwards). Stop closes every link; destruction
// stops. Thread-safety: Create, Stop and the destructor from one thread; the accessors from any
// (Peers answers nothing once stopped).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/remote/layer_stream_sender.h"
#include "storage/remote/peer_set.h"
#include "storage/remote/remote_server.h"
#include "storage/remote/remote_tier.h"
#include "storage/remote/ucx_transport.h"
#include "storage/tiered/tiered_store.h"

namespace strata::storage::remote {

struct RemoteNodeOptions {
  std::string listen_address;  // "host:port"; port 0 picks one
  std::vector<std::string> peers;
  std::string cluster_token;  // required
  std::string node_id;        // this daemon's instance id ("": hostname:port of the listener)
  // KvLayout fingerprints this node announces; empty: it serves any layout its peers ask for.
  std::vector<uint64_t> layouts;
  std::string transports;   // UCX_TLS ("" UCX's default)
  std::string net_devices;  // UCX_NET_DEVICES ("" UCX's default)
  DataPath data_path = DataPath::kAuto;
  // How long a layer stream may take from its Open to its last chunk, both ways
  // ([remote] pd_deadline_ms).
  std::chrono::milliseconds stream_deadline{30'000};
  // UcxTransportOptions::read_window_bytes ([remote] read_window_bytes).
  uint64_t read_window_bytes = 32ull << 20;
};

class RemoteNode {
 public:
  // kInvalidArgument without a cluster token; the transport's errors (a listener that cannot
  // bind).
  static absl::StatusOr<std::unique_ptr<RemoteNode>> Create(const RemoteNodeOptions& options,
                                                            TieredStore& store, RemoteTier* tier);
  ~RemoteNode();

  RemoteNode(const RemoteNode&) = delete;
  RemoteNode& operator=(const RemoteNode&) = delete;

  void Stop();

  // Where peers reach this node, and its name among them.
  const std::string& listen_address() const { return listen_address_; }
  const std::string& node_id() const { return node_id_; }
  // The peers, their traffic and their open layer streams; none once stopped. Thread-safe.
  std::vector<PeerInfo> Peers() const;
  // Whether an admitted peer is named `name` (its node id or an address of its link); false
  // once stopped. Thread-safe.
  bool HasAdmittedPeer(std::string_view name) const;
  // PeerSet::SetClusterPeers; nothing once stopped. Thread-safe.
  void SetClusterPeers(std::vector<std::string> addresses);
  RemoteServerStats ServerStats() const { return server_->Stats(); }

  // Copies `keys` (chunks of `layout` in this node's host tier) into the host tier of the peer
  // named `target` (its node id or address): the peer reads them from this node's arena, checks
  // and commits them; this node keeps its copies. Blocks up to `timeout`. kFailedPrecondition
  // when no such peer is up, kInvalidArgument for keys of another layout; when chunks fail, the
  // first failure, with how many. moved_chunks counts what the peer committed.
  absl::StatusOr<MoveResult> Push(std::string_view target, const KvLayout& layout,
                                  std::span<const ChunkKey> keys,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(30));

  // Layer streams to the peer named `target` (disaggregated prefill; layer_stream_sender.h has
  // the contract: the chunks' pages stay as they are until CommitStream's `done` has run or
  // AbortStream was called). OpenStream: kFailedPrecondition when no such peer is up,
  // kUnavailable once stopped. The others do nothing for an unknown stream or once stopped
  // (CommitStream's `done` then gets kUnavailable). Never block.
  absl::StatusOr<uint64_t> OpenStream(std::string_view target, const KvLayout& layout,
                                      std::vector<PushedChunk> chunks,
                                      std::chrono::milliseconds hold);
  void StreamLayersReady(uint64_t stream, uint32_t layers_ready);
  void CommitStream(uint64_t stream, std::vector<uint64_t> checksums, LayerStreamSender::Done done);
  void AbortStream(uint64_t stream);
  // Streams peers send here: LayerStreamReceiver::AwaitIncoming and its stats.
  bool AwaitIncoming(std::vector<ChunkKey> keys, std::chrono::milliseconds budget,
                     absl::AnyInvocable<void() &&> done) {
    return server_->AwaitIncoming(std::move(keys), budget, std::move(done));
  }
  LayerStreamStats StreamStats() const { return server_->StreamStats(); }

 private:
  RemoteNode() = default;

  HostTier* host_ = nullptr;
  std::unique_ptr<RemoteServer> server_;
  std::unique_ptr<PeerSet> peers_;
  std::string listen_address_;
  std::string node_id_;
  // Held shared by Peers, exclusively by Stop while the transport goes.
  mutable absl::Mutex mu_;
  // Declared before the transport: its calls' replies reach it until the transport is gone.
  std::unique_ptr<LayerStreamSender> streams_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<UcxTransport> transport_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace strata::storage::remote
