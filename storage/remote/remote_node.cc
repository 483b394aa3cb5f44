#include "storage/remote/remote_node.h"

#include <utility>

#include "core/status_util.h"

namespace strata::storage::remote {

absl::StatusOr<std::unique_ptr<RemoteNode>> RemoteNode::Create(const RemoteNodeOptions& options,
                                                               TieredStore& store,
                                                               RemoteTier* tier) {
  if (options.cluster_token.empty()) {
    return absl::InvalidArgumentError("remote: a cluster token is required to talk to peers");
  }
  std::unique_ptr<RemoteNode> node(new RemoteNode());
  node->server_ = std::make_unique<RemoteServer>(store.host(), RemoteServerOptions{});
  PeerSetOptions peer_options;
  peer_options.cluster_token = options.cluster_token;
  peer_options.node_id = options.node_id;
  peer_options.layouts = options.layouts;
  peer_options.peers = options.peers;
  RemoteServer* server = node->server_.get();
  peer_options.on_call = [server](PeerId peer, std::string request, Transport::Reply reply) {
    server->Handle(peer, std::move(request), std::move(reply));
  };
  node->peers_ = std::make_unique<PeerSet>(std::move(peer_options));

  const std::span<std::byte> arena(store.host().arena_base(), store.host().arena_size_bytes());
  UcxTransportOptions transport_options;
  transport_options.region = arena;
  transport_options.listen_address = options.listen_address;
  transport_options.transports = options.transports;
  transport_options.net_devices = options.net_devices;
  transport_options.data_path = options.data_path;
  transport_options.handlers = node->peers_->TransportHandlers();
  transport_options.name = "strata-" + options.node_id;
  absl::StatusOr<std::unique_ptr<UcxTransport>> transport =
      UcxTransport::Create(std::move(transport_options));
  if (!transport.ok()) return Annotate(transport.status(), "remote");
  UcxTransport* started = transport->get();
  node->listen_address_ = started->listen_address();
  {
    absl::MutexLock lock(&node->mu_);
    node->transport_ = std::move(*transport);
  }
  node->peers_->Start(started);
  node->node_id_ = node->peers_->node_id();
  if (tier != nullptr) tier->Attach(started, node->peers_.get(), arena);
  return node;
}

RemoteNode::~RemoteNode() { Stop(); }

void RemoteNode::Stop() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  stopped_ = true;
  // The PeerSet stops dialling, the transport closes every link (its handlers call into the
  // PeerSet and the server until it is gone), then they go.
  peers_->Stop();
  transport_.reset();
}

std::vector<PeerInfo> RemoteNode::Peers() const {
  absl::ReaderMutexLock lock(&mu_);
  if (stopped_) return {};
  return peers_->List();
}

}  // namespace strata::storage::remote
