// RemoteServer answers peers' remote-tier messages (remote_messages.h) with this daemon's host
// tier: Query (the leading chunks of a chain this node holds, with size, checksum and tokens),
// Lease (leases chunks for the requester to read from the arena, answering where their bytes
// lie), Release, and Push (a peer hands over chunks: the server reserves pages, reads the bytes
// from the peer's arena itself, checks each checksum and commits), and the layer streams of
// disaggregated prefill (its LayerStreamReceiver: chunks a peer hands over layer by layer).
//
// Chunks held only below the host tier (on disk) are served too, when the options name the tiers
// below (RemoteNode binds them to the TieredStore): Query describes them from the lower tier's
// index, and a Lease that names any first has them promoted into the host tier on the store's
// loads thread, then answers from there (a chunk that fails to come up is answered kAborted,
// like one that left). Chunks this node knows only on other peers are never passed on.
//
// Leases are HostTier::AcquireForCopy leases (a copy, not a load: no hit counted, the eviction
// policy untouched), kept by lease id until Release or their deadline; expired entries are swept
// on every call, so a requester that dies leaks nothing. At most `max_lease_sets` sets are held;
// beyond that a Lease is answered kResourceExhausted.
//
// Threading: Handle runs on the transport's thread; it takes the host tier's locks briefly and
// never waits for I/O (a Push's reads complete on that thread later). Thread-safe. The host tier
// must outlive the server; Attach gives it the transport it reads pushed chunks through (pushes
// are refused kUnavailable before).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "storage/host/host_tier.h"
#include "storage/remote/layer_stream_receiver.h"
#include "storage/remote/remote_messages.h"
#include "storage/remote/transport.h"
#include "storage/tiered/lower_tier.h"
#include "storage/tiered/tiered_store.h"

namespace strata::storage::remote {

struct RemoteServerOptions {
  // Longest lease granted; a peer asking for more gets this much.
  std::chrono::milliseconds max_lease{30'000};
  // How long reading a pushed batch from the pusher may take.
  std::chrono::milliseconds push_timeout{30'000};
  size_t max_lease_sets = 4096;
  // Chunks peers stream layer by layer (disaggregated prefill): layer_stream_receiver.h.
  LayerStreamReceiverOptions streams;
  // The tiers below the host tier, for chunks held only there; both empty: the host tier alone
  // is served. describe_below answers from memory (TieredStore::DescribeBelowHost);
  // promote_below brings chunks up off the caller's thread and calls its callback once they are
  // up or failed, or answers false without calling it (TieredStore::PromoteForPeer).
  std::function<std::optional<LowerTier::ChunkInfo>(const ChunkKey&)> describe_below;
  std::function<bool(std::vector<ChunkKey>, absl::AnyInvocable<void() &&>)> promote_below;
};

struct RemoteServerStats {
  uint64_t queries = 0;
  uint64_t chunks_leased = 0;
  uint64_t lease_sets_held = 0;
  uint64_t refused = 0;          // malformed or over the limit
  uint64_t chunks_received = 0;  // pushed by peers and committed here
  uint64_t leases_promoted = 0;  // Leases that first had chunks promoted from below the host tier
};

// `options` with describe_below / promote_below bound to `store`'s tiers below its host tier
// (TieredStore::DescribeBelowHost, PromoteForPeer); the store must outlive the server's calls.
RemoteServerOptions ServingBelowHost(TieredStore& store, RemoteServerOptions options = {});

class RemoteServer {
 public:
  RemoteServer(HostTier& host, RemoteServerOptions options);

  void Attach(Transport* transport) {
    transport_.store(transport, std::memory_order_release);
    streams_.Attach(transport);
  }

  // For PeerSetOptions::on_call: answers one remote-tier message.
  void Handle(PeerId peer, std::string request, Transport::Reply reply);
  // For PeerSetOptions::on_peer_down: the streams of that link end.
  void PeerDown(PeerId peer) { streams_.PeerDown(peer); }
  // LayerStreamReceiver::AwaitIncoming.
  bool AwaitIncoming(std::vector<ChunkKey> keys, std::chrono::milliseconds budget,
                     absl::AnyInvocable<void() &&> done) {
    return streams_.AwaitIncoming(std::move(keys), budget, std::move(done));
  }

  RemoteServerStats Stats() const;
  LayerStreamStats StreamStats() const { return streams_.Stats(); }

 private:
  struct LeaseSet {
    std::vector<ChunkLease> leases;
    std::chrono::steady_clock::time_point deadline;
  };

  absl::StatusOr<std::string> Query(std::string_view request);
  // Answers through `reply`: at once, or once the chunks held only below the host tier are up.
  void Lease(std::string_view request, Transport::Reply reply);
  absl::StatusOr<std::string> LeaseHeld(const LeaseRequest& request);
  absl::StatusOr<std::string> Release(std::string_view request);
  // Answers through `reply` once every pushed chunk is committed or failed.
  void Push(PeerId peer, std::string_view request, Transport::Reply reply);
  void SweepExpired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `answer` through `reply`, counting a refusal.
  void Answer(absl::StatusOr<std::string> answer, Transport::Reply reply);

  HostTier& host_;
  const RemoteServerOptions options_;
  std::atomic<Transport*> transport_{nullptr};
  LayerStreamReceiver streams_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, LeaseSet> lease_sets_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lease_id_ ABSL_GUARDED_BY(mu_) = 1;
  RemoteServerStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage::remote
