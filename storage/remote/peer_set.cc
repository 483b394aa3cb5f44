#include "storage/remote/peer_set.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/fmt_absl.h"
#include "core/host_address.h"
#include "spdlog/spdlog.h"
#include "storage/remote/peer_messages.h"

namespace strata::storage::remote {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kTick = std::chrono::milliseconds(50);

// hostname:port of the listener (just the hostname without one).
std::string DefaultNodeId(std::string_view listen_address) {
  const size_t colon = listen_address.rfind(':');
  if (colon == std::string_view::npos) return HostName();
  return fmt::format("{}:{}", HostName(), listen_address.substr(colon + 1));
}

}  // namespace

std::string_view PeerStateName(PeerState state) {
  switch (state) {
    case PeerState::kDialling:
      return "dialling";
    case PeerState::kHandshaking:
      return "handshaking";
    case PeerState::kUp:
      return "up";
    case PeerState::kDown:
      return "down";
  }
  return "unknown";
}

class PeerSet::Impl {
 public:
  explicit Impl(PeerSetOptions options) : options_(std::move(options)) {
    for (const std::string& address : options_.peers) AddPeer(address);
  }

  ~Impl() { Stop(); }

  Transport::Handlers Handlers() {
    Transport::Handlers handlers;
    handlers.on_peer_up = [this](PeerId id, std::string_view address) { OnPeerUp(id, address); };
    handlers.on_peer_down = [this](PeerId id, const absl::Status& why) { OnPeerDown(id, why); };
    handlers.on_call = [this](PeerId id, std::string request, Transport::Reply reply) {
      OnCall(id, std::move(request), std::move(reply));
    };
    return handlers;
  }

  void Start(Transport* transport) {
    {
      absl::MutexLock lock(&mu_);
      transport_ = transport;
    }
    node_id_ =
        options_.node_id.empty() ? DefaultNodeId(transport->listen_address()) : options_.node_id;
    advertised_address_ = options_.advertised_address.empty() ? transport->listen_address()
                                                              : options_.advertised_address;
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "strata-peers");
      Maintain();
    });
  }

  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
    // From here on nothing calls the transport (its handlers may still run until it is destroyed:
    // they find no transport to call), and the calls under way finish first.
    absl::MutexLock lock(&mu_);
    transport_ = nullptr;
    mu_.Await(absl::Condition(
        +[](int* uses) { return *uses == 0; }, &transport_uses_));
  }

  void AddPeer(std::string address) {
    absl::MutexLock lock(&mu_);
    for (const Dial& dial : dials_) {
      if (dial.address == address) return;
    }
    dials_.push_back(Dial{.address = std::move(address),
                          .next_attempt = Clock::now(),
                          .backoff = options_.redial_min});
  }

  void RemovePeer(std::string_view address) {
    PeerId link = 0;
    {
      absl::MutexLock lock(&mu_);
      auto it = std::find_if(dials_.begin(), dials_.end(),
                             [&](const Dial& dial) { return dial.address == address; });
      if (it == dials_.end()) return;
      link = it->link;
      dials_.erase(it);
      if (link != 0) links_.erase(link);
    }
    if (link != 0) WithTransport([&](Transport& transport) { transport.Disconnect(link); });
  }

  void SetClusterPeers(std::vector<std::string> addresses) {
    absl::MutexLock members(&cluster_mu_);
    std::sort(addresses.begin(), addresses.end());
    addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
    for (const std::string& address : addresses) {
      if (!std::binary_search(cluster_peers_.begin(), cluster_peers_.end(), address)) {
        spdlog::info("peers: {} joined the cluster", address);
        AddPeer(address);
      }
    }
    for (const std::string& address : cluster_peers_) {
      const bool configured =
          std::find(options_.peers.begin(), options_.peers.end(), address) != options_.peers.end();
      if (!configured && !std::binary_search(addresses.begin(), addresses.end(), address)) {
        spdlog::info("peers: {} left the cluster", address);
        RemovePeer(address);
      }
    }
    cluster_peers_ = std::move(addresses);
  }

  bool Admitted(PeerId peer) const {
    absl::MutexLock lock(&mu_);
    auto it = links_.find(peer);
    return it != links_.end() && it->second.state == PeerState::kUp;
  }

  std::optional<PeerId> FindAdmitted(std::string_view name) const {
    absl::MutexLock lock(&mu_);
    std::optional<PeerId> found;
    bool found_outbound = false;
    for (const auto& [id, link] : links_) {
      if (link.state != PeerState::kUp || (link.node_id != name && link.address != name)) continue;
      if (!found || (link.outbound && !found_outbound)) {
        found = id;
        found_outbound = link.outbound;
      }
    }
    return found;
  }

  std::vector<PeerId> PeersServing(uint64_t layout) const {
    absl::MutexLock lock(&mu_);
    // node id -> (link, outbound)
    absl::flat_hash_map<std::string, std::pair<PeerId, bool>> chosen;
    for (const auto& [id, link] : links_) {
      // A peer that names no layouts serves any.
      if (link.state != PeerState::kUp ||
          (!link.layouts.empty() &&
           std::find(link.layouts.begin(), link.layouts.end(), layout) == link.layouts.end())) {
        continue;
      }
      auto [it, inserted] = chosen.try_emplace(link.node_id, id, link.outbound);
      if (!inserted && link.outbound && !it->second.second) it->second = {id, true};
    }
    std::vector<PeerId> peers;
    for (const auto& [node, pick] : chosen) peers.push_back(pick.first);
    std::sort(peers.begin(), peers.end());
    return peers;
  }

  const std::string& node_id() const { return node_id_; }

  std::vector<PeerInfo> List() const {
    absl::flat_hash_map<PeerId, PeerStats> traffic;
    WithTransport([&](Transport& transport) {
      for (PeerStats& stats : transport.Peers()) traffic[stats.id] = std::move(stats);
    });
    absl::MutexLock lock(&mu_);
    std::vector<PeerInfo> peers;
    auto describe = [&](const Link& link) {
      PeerInfo info{.id = link.id,
                    .address = link.address,
                    .node_id = link.node_id,
                    .outbound = link.outbound,
                    .state = link.state,
                    .layouts = link.layouts,
                    .last_error = link.last_error};
      if (auto it = traffic.find(link.id); it != traffic.end()) {
        info.bytes_read = it->second.bytes_read;
        info.bytes_served = it->second.bytes_served;
      }
      return info;
    };
    for (const Dial& dial : dials_) {
      auto link = dial.link == 0 ? links_.end() : links_.find(dial.link);
      if (link != links_.end()) {
        PeerInfo info = describe(link->second);
        if (info.last_error.empty()) info.last_error = dial.last_error;
        peers.push_back(std::move(info));
      } else {
        peers.push_back(PeerInfo{.address = dial.address,
                                 .outbound = true,
                                 .state = dial.dialling ? PeerState::kDialling : PeerState::kDown,
                                 .last_error = dial.last_error});
      }
    }
    for (const auto& [id, link] : links_) {
      if (!link.outbound) peers.push_back(describe(link));
    }
    return peers;
  }

 private:
  struct Link {
    PeerId id = 0;
    std::string address;
    bool outbound = false;
    PeerState state = PeerState::kHandshaking;
    std::string node_id;
    std::string listen_address;  // the peer's own listener, as its handshake told (inbound links)
    std::vector<uint64_t> layouts;
    Clock::time_point since;
    bool ping_in_flight = false;
    Clock::time_point last_ping;
    uint32_t missed_pings = 0;
    std::string last_error;
  };

  // A configured peer, dialled while it has no link.
  struct Dial {
    std::string address;
    PeerId link = 0;
    bool dialling = false;
    Clock::time_point next_attempt;
    std::chrono::milliseconds backoff{0};
    std::string last_error;
  };

  void Maintain();
  void DialOne(std::string address);
  bool Dialled(PeerId id) const;
  void OnHandshakeReply(PeerId id, absl::StatusOr<std::string> reply);
  void OnPong(PeerId id, const absl::Status& status);
  void OnPeerUp(PeerId id, std::string_view address);
  void OnPeerDown(PeerId id, const absl::Status& why);
  void OnCall(PeerId id, std::string request, Transport::Reply reply);
  void AnswerHandshake(PeerId id, std::string_view request, Transport::Reply reply);
  // Calls `use` with the transport, unless Stop has begun (then not at all); Stop waits for the
  // calls under way. The maintenance thread, which Stop joins, reads transport_ directly.
  template <typename Use>
  void WithTransport(Use use) const {
    Transport* transport = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (transport_ == nullptr) return;
      transport = transport_;
      ++transport_uses_;
    }
    use(*transport);
    absl::MutexLock lock(&mu_);
    --transport_uses_;
  }
  // Whether the peer listening at `address` has dialled this node and is admitted: a link serves
  // both ways, so it is not dialled too. (Two links between the same pair, one of them still
  // wiring up when the peer died, crashed UCX 1.13 in its failure handling.)
  bool LinkedFromLocked(std::string_view address) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return std::any_of(links_.begin(), links_.end(), [&](const auto& entry) {
      const Link& link = entry.second;
      return !link.outbound && link.state == PeerState::kUp && link.listen_address == address;
    });
  }
  // Marks the dial of `address` failed and schedules its next attempt (lock held).
  void DialFailed(const std::string& address, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PeerSetOptions options_;
  // Set by Start, before the maintenance thread and any handshake reads them.
  std::string node_id_;
  std::string advertised_address_;
  // The peers the cluster's membership names, sorted (SetClusterPeers). Taken before mu_.
  absl::Mutex cluster_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::vector<std::string> cluster_peers_ ABSL_GUARDED_BY(cluster_mu_);
  mutable absl::Mutex mu_;
  Transport* transport_ ABSL_GUARDED_BY(mu_) = nullptr;  // null before Start and after Stop
  mutable int transport_uses_ ABSL_GUARDED_BY(mu_) = 0;  // WithTransport calls under way
  absl::flat_hash_map<PeerId, Link> links_ ABSL_GUARDED_BY(mu_);
  std::vector<Dial> dials_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

void PeerSet::Impl::Maintain() {
  Transport* transport = nullptr;
  {
    absl::MutexLock lock(&mu_);
    transport = transport_;
  }
  for (;;) {
    std::vector<std::string> to_dial;
    std::vector<PeerId> to_ping;
    std::vector<PeerId> to_close;
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(kTick));
      if (stopping_) return;
      const Clock::time_point now = Clock::now();
      for (Dial& dial : dials_) {
        if (dial.link == 0 && !dial.dialling && now >= dial.next_attempt &&
            !LinkedFromLocked(dial.address)) {
          dial.dialling = true;
          to_dial.push_back(dial.address);
        }
      }
      for (auto& [id, link] : links_) {
        if (link.state == PeerState::kUp && !link.ping_in_flight &&
            now - link.last_ping >= options_.health_interval) {
          link.ping_in_flight = true;
          link.last_ping = now;
          to_ping.push_back(id);
        } else if (link.state == PeerState::kHandshaking && !link.outbound &&
                   now - link.since >= options_.handshake_timeout) {
          to_close.push_back(id);
        }
      }
    }
    for (std::string& address : to_dial) DialOne(std::move(address));
    for (PeerId id : to_ping) {
      transport->Call(id, EncodePing(), Clock::now() + options_.health_timeout,
                      [this, id](absl::StatusOr<std::string> pong) { OnPong(id, pong.status()); });
    }
    for (PeerId id : to_close) {
      spdlog::warn("peers: closing inbound link {}: no handshake within {} ms", id,
                   options_.handshake_timeout.count());
      transport->Disconnect(id);
    }
  }
}

void PeerSet::Impl::DialOne(std::string address) {
  Transport* transport = nullptr;
  {
    absl::MutexLock lock(&mu_);
    transport = transport_;
  }
  absl::StatusOr<PeerId> linked = transport->Connect(address, options_.connect_timeout);
  {
    absl::MutexLock lock(&mu_);
    auto dial = std::find_if(dials_.begin(), dials_.end(),
                             [&](const Dial& d) { return d.address == address; });
    if (!linked.ok()) {
      DialFailed(address, linked.status());
      return;
    }
    if (dial != dials_.end()) {
      dial->link = *linked;
      dial->dialling = false;
      Link& link = links_[*linked];
      link.id = *linked;
      link.address = address;
      link.outbound = true;
      link.state = PeerState::kHandshaking;
      link.since = Clock::now();
    }
  }
  // Transport calls are made without the lock: a transport that is shutting down completes a
  // call at once, on this thread, and the completion takes the lock.
  const PeerId id = *linked;
  if (!Dialled(id)) {
    transport->Disconnect(id);  // removed while we dialled
    return;
  }
  Handshake handshake{
      .node_id = node_id_, .listen_address = advertised_address_, .layouts = options_.layouts};
  transport->Call(
      id, EncodeHandshake(handshake), Clock::now() + options_.handshake_timeout,
      [this, id](absl::StatusOr<std::string> reply) { OnHandshakeReply(id, std::move(reply)); });
}

bool PeerSet::Impl::Dialled(PeerId id) const {
  absl::MutexLock lock(&mu_);
  return std::any_of(dials_.begin(), dials_.end(), [&](const Dial& d) { return d.link == id; });
}

void PeerSet::Impl::DialFailed(const std::string& address, const absl::Status& why) {
  auto dial = std::find_if(dials_.begin(), dials_.end(),
                           [&](const Dial& d) { return d.address == address; });
  if (dial == dials_.end()) return;
  if (dial->last_error != why.ToString()) {
    spdlog::warn("peers: {}: {} (retrying with backoff)", address, why);
  }
  dial->last_error = why.ToString();
  dial->link = 0;
  dial->dialling = false;
  dial->next_attempt = Clock::now() + dial->backoff;
  dial->backoff = std::min(options_.redial_max, std::max(options_.redial_min, dial->backoff * 2));
}

void PeerSet::Impl::OnHandshakeReply(PeerId id, absl::StatusOr<std::string> reply) {
  absl::StatusOr<HandshakeReply> admitted =
      reply.ok() ? DecodeHandshakeReply(*reply) : absl::StatusOr<HandshakeReply>(reply.status());
  {
    absl::MutexLock lock(&mu_);
    auto link = links_.find(id);
    if (link == links_.end()) return;
    if (admitted.ok()) {
      link->second.state = PeerState::kUp;
      link->second.node_id = admitted->node_id;
      link->second.layouts = admitted->layouts;
      link->second.last_error.clear();
      link->second.last_ping = Clock::now();
      for (Dial& dial : dials_) {
        if (dial.link == id) {
          dial.backoff = options_.redial_min;
          dial.last_error.clear();
        }
      }
      spdlog::info("peers: {} is up (node {}, {} layouts)", link->second.address, admitted->node_id,
                   admitted->layouts.size());
      return;
    }
    const absl::Status why =
        absl::Status(admitted.status().code(),
                     fmt::format("handshake refused: {}", admitted.status().message()));
    const std::string address = link->second.address;
    links_.erase(link);
    DialFailed(address, why);
  }
  WithTransport([&](Transport& transport) { transport.Disconnect(id); });
}

void PeerSet::Impl::OnPong(PeerId id, const absl::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    auto link = links_.find(id);
    if (link == links_.end()) return;
    link->second.ping_in_flight = false;
    if (status.ok()) {
      link->second.missed_pings = 0;
      return;
    }
    link->second.last_error = fmt::format("ping: {}", status);
    if (++link->second.missed_pings < options_.missed_pings_to_drop) return;
    spdlog::warn("peers: dropping {}: {} pings missed ({})", link->second.address,
                 link->second.missed_pings, status);
  }
  WithTransport([&](Transport& transport) { transport.Disconnect(id); });
}

void PeerSet::Impl::OnPeerUp(PeerId id, std::string_view address) {
  absl::MutexLock lock(&mu_);
  auto [link, inserted] = links_.try_emplace(id);
  if (!inserted) return;
  link->second.id = id;
  link->second.address = std::string(address);
  link->second.since = Clock::now();
}

void PeerSet::Impl::OnPeerDown(PeerId id, const absl::Status& why) {
  {
    absl::MutexLock lock(&mu_);
    auto link = links_.find(id);
    if (link != links_.end()) {
      if (link->second.state == PeerState::kUp) {
        spdlog::warn("peers: {} went down: {}", link->second.address, why);
      }
      links_.erase(link);
    }
    for (Dial& dial : dials_) {
      if (dial.link == id) DialFailed(dial.address, why);
    }
  }
  if (options_.on_peer_down) options_.on_peer_down(id);
}

void PeerSet::Impl::OnCall(PeerId id, std::string request, Transport::Reply reply) {
  absl::StatusOr<uint8_t> type = MessageType(request);
  if (!type.ok()) {
    std::move(reply)(type.status());
    return;
  }
  if (*type == static_cast<uint8_t>(PeerMessage::kHandshake)) {
    AnswerHandshake(id, request, std::move(reply));
    return;
  }
  if (!Admitted(id)) {
    std::move(reply)(absl::PermissionDeniedError("peers: this link has not been admitted"));
    return;
  }
  if (*type == static_cast<uint8_t>(PeerMessage::kPing)) {
    std::move(reply)(std::string());
  } else if (*type >= kFirstApplicationMessage && options_.on_call) {
    options_.on_call(id, std::move(request), std::move(reply));
  } else {
    std::move(reply)(
        absl::InvalidArgumentError(fmt::format("peers: unknown message type {}", *type)));
  }
}

void PeerSet::Impl::AnswerHandshake(PeerId id, std::string_view request, Transport::Reply reply) {
  absl::StatusOr<Handshake> handshake = DecodeHandshake(request);
  absl::Status refused;
  if (!handshake.ok()) {
    refused = handshake.status();
  } else if (handshake->protocol_version != kPeerProtocolVersion) {
    refused = absl::FailedPreconditionError(
        fmt::format("peer protocol version {}, this daemon speaks {}", handshake->protocol_version,
                    kPeerProtocolVersion));
  }
  {
    absl::MutexLock lock(&mu_);
    auto link = links_.find(id);
    const std::string address = link == links_.end() ? "?" : link->second.address;
    if (!refused.ok()) {
      spdlog::warn("peers: refused {} (node {}): {}", address,
                   handshake.ok() ? handshake->node_id : "?", refused);
      if (link != links_.end()) link->second.last_error = refused.ToString();
    } else if (link != links_.end()) {
      link->second.state = PeerState::kUp;
      link->second.node_id = handshake->node_id;
      link->second.listen_address = handshake->listen_address;
      link->second.layouts = handshake->layouts;
      link->second.last_ping = Clock::now();
      spdlog::info("peers: admitted {} (node {})", address, handshake->node_id);
    }
  }
  if (!refused.ok()) {
    std::move(reply)(refused);
    return;
  }
  std::move(reply)(
      EncodeHandshakeReply(HandshakeReply{.node_id = node_id_, .layouts = options_.layouts}));
}

PeerSet::PeerSet(PeerSetOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
PeerSet::~PeerSet() = default;
Transport::Handlers PeerSet::TransportHandlers() { return impl_->Handlers(); }
void PeerSet::Start(Transport* transport) { impl_->Start(transport); }
void PeerSet::Stop() { impl_->Stop(); }
void PeerSet::AddPeer(std::string address) { impl_->AddPeer(std::move(address)); }
void PeerSet::RemovePeer(std::string_view address) { impl_->RemovePeer(address); }
void PeerSet::SetClusterPeers(std::vector<std::string> addresses) {
  impl_->SetClusterPeers(std::move(addresses));
}
bool PeerSet::Admitted(PeerId peer) const { return impl_->Admitted(peer); }
std::optional<PeerId> PeerSet::FindAdmitted(std::string_view name) const {
  return impl_->FindAdmitted(name);
}
std::vector<PeerId> PeerSet::PeersServing(uint64_t layout) const {
  return impl_->PeersServing(layout);
}
std::vector<PeerInfo> PeerSet::List() const { return impl_->List(); }
const std::string& PeerSet::node_id() const { return impl_->node_id(); }

}  // namespace strata::storage::remote
