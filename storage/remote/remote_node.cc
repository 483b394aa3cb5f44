#include "storage/remote/remote_node.h"

#include <utility>

#include "absl/synchronization/notification.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/remote/internal/wire_status.h"

namespace strata::storage::remote {

absl::StatusOr<std::unique_ptr<RemoteNode>> RemoteNode::Create(const RemoteNodeOptions& options,
                                                               TieredStore& store,
                                                               RemoteTier* tier) {
  if (options.cluster_token.empty()) {
    return absl::InvalidArgumentError("remote: a cluster token is required to talk to peers");
  }
  std::unique_ptr<RemoteNode> node(new RemoteNode());
  node->host_ = &store.host();
  RemoteServerOptions server_options;
  server_options.streams.deadline = options.stream_deadline;
  node->server_ =
      std::make_unique<RemoteServer>(store.host(), ServingBelowHost(store, server_options));
  PeerSetOptions peer_options;
  peer_options.node_id = options.node_id;
  peer_options.layouts = options.layouts;
  peer_options.peers = options.peers;
  RemoteServer* server = node->server_.get();
  peer_options.on_call = [server](PeerId peer, std::string request, Transport::Reply reply) {
    server->Handle(peer, std::move(request), std::move(reply));
  };
  peer_options.on_peer_down = [server, tier](PeerId peer) {
    server->PeerDown(peer);
    if (tier != nullptr) tier->ForgetPeer(peer);
  };
  node->peers_ = std::make_unique<PeerSet>(std::move(peer_options));

  const std::span<std::byte> arena(store.host().arena_base(), store.host().arena_size_bytes());
  UcxTransportOptions transport_options;
  transport_options.region = arena;
  transport_options.cluster_secret = options.cluster_token;
  transport_options.listen_address = options.listen_address;
  transport_options.transports = options.transports;
  transport_options.net_devices = options.net_devices;
  transport_options.data_path = options.data_path;
  transport_options.read_window_bytes = options.read_window_bytes;
  transport_options.handlers = node->peers_->TransportHandlers();
  transport_options.name = "strata-" + options.node_id;
  absl::StatusOr<std::unique_ptr<UcxTransport>> transport =
      UcxTransport::Create(std::move(transport_options));
  if (!transport.ok()) return Annotate(transport.status(), "remote");
  UcxTransport* started = transport->get();
  node->listen_address_ = started->listen_address();
  {
    absl::MutexLock lock(&node->mu_);
    node->streams_ = std::make_unique<LayerStreamSender>(
        **transport, LayerStreamSenderOptions{.deadline = options.stream_deadline});
    node->transport_ = std::move(*transport);
  }
  node->server_->Attach(started);
  node->peers_->Start(started);
  node->node_id_ = node->peers_->node_id();
  if (tier != nullptr) tier->Attach(started, node->peers_.get(), store.host().arena_pages());
  return node;
}

RemoteNode::~RemoteNode() { Stop(); }

void RemoteNode::Stop() {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  stopped_ = true;
  // The PeerSet stops dialling, the server starts the reads it has queued and takes no more, the
  // transport closes every link (its handlers call into the PeerSet and the server until it is
  // gone), then they go.
  peers_->Stop();
  server_->Detach();
  transport_.reset();
}

absl::StatusOr<MoveResult> RemoteNode::Push(std::string_view target, const KvLayout& layout,
                                            std::span<const ChunkKey> keys,
                                            std::chrono::milliseconds timeout) {
  absl::ReaderMutexLock lock(&mu_);
  if (stopped_) return absl::UnavailableError("remote: stopped");
  const std::optional<PeerId> peer = peers_->FindAdmitted(target);
  if (!peer.has_value()) {
    return absl::FailedPreconditionError(fmt::format(
        "remote: no peer named '{}' is up ('strata peers' lists them by node id and address)",
        target));
  }
  const uint64_t fingerprint = layout.Fingerprint();
  MoveResult result;
  PushRequest request{.layout = layout};
  std::vector<ChunkLease> leases;  // held until the peer has read the chunks
  for (const ChunkKey& key : keys) {
    if (key.layout_fingerprint() != fingerprint) {
      return absl::InvalidArgumentError(fmt::format("remote: chunk {} is not of layout {}",
                                                    key.ToString(), layout.DebugString()));
    }
    absl::StatusOr<std::optional<ChunkLease>> lease = host_->AcquireForCopy(key, timeout);
    if (!lease.ok()) return lease.status();
    if (!lease->has_value()) {
      ++result.missing_chunks;
      continue;
    }
    PushedChunk pushed{.key = key,
                       .chunk = {.payload_bytes = (*lease)->size_bytes(),
                                 .payload_checksum = (*lease)->checksum(),
                                 .num_tokens = (*lease)->num_tokens()}};
    for (const ArenaRange& range : (*lease)->ranges()) {
      pushed.ranges.push_back({.offset = range.offset, .length = range.size_bytes});
    }
    request.chunks.push_back(std::move(pushed));
    leases.push_back(std::move(**lease));
  }
  if (request.chunks.empty()) return result;

  absl::Notification answered;
  absl::StatusOr<std::string> answer;
  transport_->Call(*peer, EncodePush(request), std::chrono::steady_clock::now() + timeout,
                   [&](absl::StatusOr<std::string> reply) {
                     answer = std::move(reply);
                     answered.Notify();
                   });
  answered.WaitForNotification();  // the transport completes every call by its deadline
  absl::StatusOr<PushReply> reply =
      answer.ok() ? DecodePushReply(*answer) : absl::StatusOr<PushReply>(answer.status());
  if (!reply.ok()) return Annotate(reply.status(), fmt::format("remote: push to {}", target));
  if (reply->codes.size() != request.chunks.size()) {
    return absl::DataLossError("remote: the peer answered a push for another number of chunks");
  }
  absl::Status first_failure;
  uint64_t failures = 0;
  for (size_t i = 0; i < reply->codes.size(); ++i) {
    const auto code = static_cast<absl::StatusCode>(reply->codes[i]);
    if (code == absl::StatusCode::kOk) {
      ++result.moved_chunks;
    } else if (code == absl::StatusCode::kAlreadyExists) {
      ++result.already_in_target;
    } else if (++failures == 1) {
      first_failure = internal::StatusFromWire(
          reply->codes[i],
          fmt::format("remote: {} failed on {}", request.chunks[i].key.ToString(), target));
    }
  }
  if (failures > 0) {
    return Annotate(first_failure,
                    fmt::format("{} of {} chunks were not pushed ({} were)", failures,
                                request.chunks.size(), result.moved_chunks));
  }
  return result;
}

absl::StatusOr<uint64_t> RemoteNode::OpenStream(std::string_view target, const KvLayout& layout,
                                                std::vector<PushedChunk> chunks,
                                                std::chrono::milliseconds hold) {
  absl::ReaderMutexLock lock(&mu_);
  if (stopped_) return absl::UnavailableError("remote: stopped");
  const std::optional<PeerId> peer = peers_->FindAdmitted(target);
  if (!peer.has_value()) {
    return absl::FailedPreconditionError(
        fmt::format("remote: no peer named '{}' is up to stream to", target));
  }
  std::vector<RemoteRange> pages;
  for (const PushedChunk& chunk : chunks) {
    pages.insert(pages.end(), chunk.ranges.begin(), chunk.ranges.end());
  }
  server_->PrefaultInBackground(std::move(pages));
  return streams_->Open(*peer, layout, std::move(chunks), hold);
}

void RemoteNode::StreamLayersReady(uint64_t stream, uint32_t layers_ready) {
  absl::ReaderMutexLock lock(&mu_);
  if (!stopped_) streams_->LayersReady(stream, layers_ready);
}

void RemoteNode::CommitStream(uint64_t stream, std::vector<uint64_t> checksums,
                              LayerStreamSender::Done done) {
  {
    absl::ReaderMutexLock lock(&mu_);
    if (!stopped_) {
      streams_->Commit(stream, std::move(checksums), std::move(done));
      return;
    }
  }
  std::move(done)(absl::UnavailableError("remote: stopped"));
}

void RemoteNode::AbortStream(uint64_t stream) {
  absl::ReaderMutexLock lock(&mu_);
  if (!stopped_) streams_->Abort(stream);
}

bool RemoteNode::HasAdmittedPeer(std::string_view name) const {
  absl::ReaderMutexLock lock(&mu_);
  return !stopped_ && peers_->FindAdmitted(name).has_value();
}

void RemoteNode::SetClusterPeers(std::vector<std::string> addresses) {
  absl::ReaderMutexLock lock(&mu_);
  if (!stopped_) peers_->SetClusterPeers(std::move(addresses));
}

std::vector<PeerInfo> RemoteNode::Peers() const {
  absl::ReaderMutexLock lock(&mu_);
  if (stopped_) return {};
  std::vector<PeerInfo> peers = peers_->List();
  const absl::flat_hash_map<PeerId, uint32_t> in = server_->OpenStreamsIn();
  const absl::flat_hash_map<PeerId, uint32_t> out =
      streams_ != nullptr ? streams_->OpenStreams() : absl::flat_hash_map<PeerId, uint32_t>();
  for (PeerInfo& peer : peers) {
    if (peer.id == 0) continue;  // no link, no streams
    if (auto it = in.find(peer.id); it != in.end()) peer.streams_in = it->second;
    if (auto it = out.find(peer.id); it != out.end()) peer.streams_out = it->second;
  }
  return peers;
}

}  // namespace strata::storage::remote
