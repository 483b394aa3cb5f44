// PeerSet keeps a daemon's peers over a Transport: it dials the configured peers and redials
// them with backoff while they are down, admits a link only after a handshake that checks the
// protocol version (a peer speaking another is refused and logged), learns each peer's node id
// and the KvLayouts it serves, health-checks admitted peers with
// pings and drops one that misses too many, and closes inbound links that never handshake.
// Peers may join (AddPeer) and leave (RemovePeer) at run time, and the cluster controller's
// membership names the peers to keep dialled (SetClusterPeers) besides the configured ones.
//
// The layers above (the remote tier, PD transfer) call peers through the transport and ask the
// PeerSet which peers are admitted and what they serve; application calls from peers reach them
// through PeerSetOptions::on_call, only from admitted peers (others are answered
// kPermissionDenied).
//
// Authentication is the transport's (UcxTransport: a mutual challenge-response over the cluster
// secret before the link comes up), so every link the PeerSet sees has proved both ends.
//
// Lifecycle: construct, hand TransportHandlers() to the transport when creating it, then Start
// with that transport. To shut down: Stop, then destroy the transport (its handlers call into the
// PeerSet until it is gone), then the PeerSet. Once Stop returns the PeerSet calls its transport
// no more, so a wrapper started in its place (FaultInjectingTransport) may be destroyed before the
// transport it wraps. Thread-safety: every method is thread-safe; handlers run on the transport's
// thread and only take the PeerSet's lock briefly.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/remote/transport.h"

namespace strata::storage::remote {

struct PeerSetOptions {
  std::string node_id;  // this daemon's instance id
  // This daemon's listener, told to peers; "": the transport's listen address.
  std::string advertised_address;
  std::vector<uint64_t> layouts;   // KvLayout fingerprints this daemon serves
  std::vector<std::string> peers;  // "host:port" of peers to dial and keep dialled
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds handshake_timeout{2000};
  std::chrono::milliseconds health_interval{1000};
  std::chrono::milliseconds health_timeout{500};
  uint32_t missed_pings_to_drop = 3;
  std::chrono::milliseconds redial_min{100};
  std::chrono::milliseconds redial_max{5000};
  // Application calls (type >= kFirstApplicationMessage) from admitted peers.
  std::function<void(PeerId, std::string request, Transport::Reply reply)> on_call;
  // A link went down (either direction, admitted or not), after the PeerSet forgot it; on the
  // transport's thread.
  std::function<void(PeerId)> on_peer_down;
};

enum class PeerState : uint8_t { kDialling, kHandshaking, kUp, kDown };
std::string_view PeerStateName(PeerState state);

struct PeerInfo {
  PeerId id = 0;  // 0 while there is no link
  std::string address;
  std::string node_id;  // known once admitted
  bool outbound = false;
  PeerState state = PeerState::kDown;
  std::vector<uint64_t> layouts;
  uint64_t bytes_read = 0;    // by our reads from the peer
  uint64_t bytes_served = 0;  // by the peer's reads of our region
  std::string last_error;
  // Layer streams open now: the peer's into this node, and this node's to the peer (filled by
  // RemoteNode::Peers; PeerSet knows no streams).
  uint32_t streams_in = 0;
  uint32_t streams_out = 0;
};

class PeerSet {
 public:
  explicit PeerSet(PeerSetOptions options);
  ~PeerSet();

  PeerSet(const PeerSet&) = delete;
  PeerSet& operator=(const PeerSet&) = delete;

  // The handlers the transport must be created with.
  Transport::Handlers TransportHandlers();
  // Starts dialling and health checks over `transport`.
  void Start(Transport* transport);
  // Ends the maintenance thread; links stay open until the transport goes.
  void Stop();

  // Dials a new peer (no-op when it is configured already) / stops dialling one and closes its
  // link.
  void AddPeer(std::string address);
  void RemovePeer(std::string_view address);
  // The peers the cluster's membership names now: dials those it did not name before, and stops
  // dialling (and closes the links of) those it no longer names, unless they are configured
  // (PeerSetOptions::peers), which stay.
  void SetClusterPeers(std::vector<std::string> addresses);

  bool Admitted(PeerId peer) const;
  // The admitted link to the peer named `name` (its node id, or the address it was dialled at or
  // dialled from), the one we dialled when there are two; nullopt when none is up.
  std::optional<PeerId> FindAdmitted(std::string_view name) const;
  // One admitted link per peer node serving `layout` (or naming no layouts: it serves any), the
  // one we dialled when there are two.
  std::vector<PeerId> PeersServing(uint64_t layout) const;
  std::vector<PeerInfo> List() const;
  // The name peers know this daemon by (known from Start).
  const std::string& node_id() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::storage::remote
