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
// like one that left). Chunks this node knows only on other peers are never passed on. Host
// chunks held compressed (Compress, [host] codec) are described as they decode, and a Lease that
// names any has the store decode them back in place first, the same way (peers never read a
// frame); without the tiers' hooks they are not served.
//
// Leases are HostTier::AcquireForCopy leases (a copy, not a load: no hit counted, the eviction
// policy untouched), kept by lease id until Release or their deadline; expired entries are swept
// on every call, so a requester that dies leaks nothing. At most `max_lease_sets` sets are held;
// beyond that a Lease is answered kResourceExhausted.
//
// Threading: Handle runs on the transport's thread; it takes the host tier's locks briefly and
// never waits for I/O. A Push's reads start, and what they bring is checked and committed, on the
// server's landing thread (internal/landing.h), which faults the pages in first; a Lease is
// answered from that thread too, once the leased pages are faulted into this process (the peer's
// reads of them are served by the transport's thread, which must not fault). Thread-safe. The
// host tier must outlive the server; Attach gives it the transport it reads pushed chunks through
// (pushes are refused kUnavailable before); Detach before that transport is destroyed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "storage/host/host_tier.h"
#include "storage/remote/internal/landing.h"
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
  // promote_below brings chunks up off the caller's thread, as plain host chunks (promoted from
  // below, or decoded back in place), and calls its callback once they are up or failed, or
  // answers false without calling it (TieredStore::PromoteForPeer).
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
                                 // or decoded back in place
};

// `options` with describe_below / promote_below bound to `store`'s tiers below its host tier
// (TieredStore::DescribeBelowHost, PromoteForPeer); the store must outlive the server's calls.
RemoteServerOptions ServingBelowHost(TieredStore& store, RemoteServerOptions options = {});

class RemoteServer {
 public:
  RemoteServer(HostTier& host, RemoteServerOptions options);
  // Detaches, so that no landing work outlives the server.
  ~RemoteServer() { Detach(); }
  RemoteServer(const RemoteServer&) = delete;
  RemoteServer& operator=(const RemoteServer&) = delete;

  // The transport pushed and streamed chunks are read through (they are refused kUnavailable
  // before). Detach before the transport goes: the reads queued start, and later ones fail.
  void Attach(Transport* transport) { landing_.Attach(transport); }
  void Detach() { landing_.Detach(); }

  // For PeerSetOptions::on_call: answers one remote-tier message.
  void Handle(PeerId peer, std::string request, Transport::Reply reply);
  // For PeerSetOptions::on_peer_down: the streams of that link end.
  void PeerDown(PeerId peer) { streams_.PeerDown(peer); }
  // LayerStreamReceiver::AwaitIncoming.
  bool AwaitIncoming(std::vector<ChunkKey> keys, std::chrono::milliseconds budget,
                     absl::AnyInvocable<void() &&> done) {
    return streams_.AwaitIncoming(std::move(keys), budget, std::move(done));
  }

  // Faults the pages under `ranges` (of this node's arena) into this process on the landing thread,
  // ahead of a peer's reads of them (the chunks of a stream this node pushes), so that the
  // transport's thread that serves those reads finds them in.
  void PrefaultInBackground(std::vector<RemoteRange> ranges);

  RemoteServerStats Stats() const;
  LayerStreamStats StreamStats() const { return streams_.Stats(); }
  // The layer streams peers are pushing here, by peer.
  absl::flat_hash_map<PeerId, uint32_t> OpenStreamsIn() const { return streams_.OpenStreams(); }

 private:
  struct LeaseSet {
    std::vector<ChunkLease> leases;
    std::chrono::steady_clock::time_point deadline;
  };

  absl::StatusOr<std::string> Query(std::string_view request);
  // Answers through `reply`: at once, or once the chunks held only below the host tier are up.
  void Lease(std::string_view request, Transport::Reply reply);
  absl::StatusOr<LeaseReply> LeaseHeld(const LeaseRequest& request);
  // Leases what the host tier holds and answers, from the landing thread once the leased pages
  // are faulted in.
  void AnswerLease(const LeaseRequest& request, Transport::Reply reply);
  void PrefaultServed(std::span<const RemoteRange> ranges) const;
  absl::StatusOr<std::string> Release(std::string_view request);
  struct PushRound;
  // Answers through `reply` once every pushed chunk is committed or failed.
  void Push(PeerId peer, std::string_view request, Transport::Reply reply);
  // Checks and commits (or aborts) chunk `i` of `round` once its read completed with `read`; the
  // last one answers the round. On the landing thread.
  void Land(PushRound& round, size_t i, absl::Status read);
  void SweepExpired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `answer` through `reply`, counting a refusal.
  void Answer(absl::StatusOr<std::string> answer, Transport::Reply reply);

  HostTier& host_;
  const RemoteServerOptions options_;
  // Faults in the pages pushed and streamed chunks land in, starts their reads and checks them,
  // off the transport's thread. Before streams_, which uses it.
  internal::Landing landing_;
  LayerStreamReceiver streams_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, LeaseSet> lease_sets_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lease_id_ ABSL_GUARDED_BY(mu_) = 1;
  RemoteServerStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage::remote
