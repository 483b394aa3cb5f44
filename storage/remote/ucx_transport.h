// UcxTransport is the Transport over UCX's UCP API: one UCP context and worker, driven by one
// progress thread ("strata-ucx") that sleeps on the worker's event fd between network events (no
// timed polling), a listener on a configured address, and one endpoint per peer. The region is
// mapped with ucp_mem_map once; its packed rkey, base address and size travel to each peer in the
// link's hello, so requests need no per-transfer registration.
//
// Authentication. A new link carries nothing but a mutual challenge-response over the cluster
// secret (internal/peer_auth.h: HMAC-SHA256 over fresh nonces from both ends; the secret never
// crosses). Only once each end has verified the other's proof does it send its hello (region,
// rkey); a link is up, and carries calls and reads, only after both. A peer that sends anything
// else first or takes longer than auth_timeout is dropped; one that proves wrongly is sent a
// refusal and nothing more is read from it, its link closed once it closes its end (at most a
// second later), so that the refusal reaches it before the close does; no more than
// max_links_authenticating links may be authenticating at once (more are rejected). A reply or
// read answer is taken only from the peer the request went to. After authentication, messages and
// KV bytes cross in the clear (UCX does not encrypt): the network between peers must be private
// (docs/cluster.md, "Security of peer links").
//
// Data path per link (DataPath::kAuto, data_path.h says why): active messages, whose receiver
// places each segment's bytes straight into the destination (ucp_am_recv_data_nbx into the region
// for rendezvous sizes), or one-sided RMA (ucp_get_nbx / ucp_put_nbx plus a flush) where a
// configured RDMA transport does it in hardware.
//
// Thread-safety and lifetime as in transport.h. The caller keeps the region mapped until the
// transport is destroyed.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "storage/remote/transport.h"

namespace strata::storage::remote {

struct UcxTransportOptions {
  // The memory peers read (the host arena); registered for the transport's lifetime.
  std::span<std::byte> region;
  // The secret every daemon of the cluster holds; required.
  std::string cluster_secret;
  // How long a new link may take to authenticate and exchange hellos before it is dropped.
  std::chrono::milliseconds auth_timeout{5000};
  // Links not yet up that may exist at once; connection requests past it are rejected.
  size_t max_links_authenticating = 64;
  // "host:port" to listen on (port 0: the OS picks; listen_address() tells). Empty: no listener,
  // the transport only dials out.
  std::string listen_address;
  DataPath data_path = DataPath::kAuto;
  // UCX transports this transport may use (UCX_TLS syntax: "tcp", "posix,cma,tcp", "rc,tcp").
  // Empty: UCX's own default (its environment, else every transport it finds).
  std::string transports;
  // Network devices for tcp and RDMA (UCX_NET_DEVICES syntax: "lo", "eth0,mlx5_0:1"). Empty:
  // UCX's default.
  std::string net_devices;
  Transport::Handlers handlers;
  // Active-message reads: most bytes asked of one peer and not yet received. Segments past it
  // wait here, in order, and are asked for as earlier ones land. The peer sends what it is asked
  // for on the link's one connection, so without a window a large read queued gigabytes ahead of
  // every later message on it, health-check answers included, and links were dropped for missed
  // pings in the middle of a transfer. A segment larger than the window goes alone.
  uint64_t read_window_bytes = 32ull << 20;
  // Names the UCP context and worker in UCX's logs.
  std::string name = "strata";
};

class UcxTransport final : public Transport {
 public:
  // kInvalidArgument for an empty region or secret, or a malformed listen address; kUnavailable
  // when UCX
  // cannot start or the listener cannot bind (the message says which and why).
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Create(UcxTransportOptions options);

  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;
  ~UcxTransport() override;

  std::string listen_address() const override;
  uint64_t region_bytes() const override;
  absl::StatusOr<PeerId> Connect(std::string_view address,
                                 std::chrono::milliseconds timeout) override;
  void Disconnect(PeerId peer) override;
  RequestId Read(PeerId peer, std::span<const Segment> segments, Deadline deadline,
                 Completion done) override;
  RequestId Call(PeerId peer, std::string request, Deadline deadline, Reply done) override;
  void Cancel(RequestId request) override;
  std::vector<PeerStats> Peers() const override;

  class Impl;

 private:
  explicit UcxTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::storage::remote
