// RemoteServer answers peers' remote-tier messages (remote_messages.h) with this daemon's host
// tier: Query (the leading chunks of a chain the host tier holds, with size, checksum and
// tokens), Lease (leases chunks for the requester to read from the arena, answering where their
// bytes lie), Release, and Push (a peer hands over chunks: the server reserves pages, reads the
// bytes from the peer's arena itself, checks each checksum and commits). Chunks held only below
// the host tier are not served yet: a peer sees them as misses.
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
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "storage/host/host_tier.h"
#include "storage/remote/transport.h"

namespace strata::storage::remote {

struct RemoteServerOptions {
  // Longest lease granted; a peer asking for more gets this much.
  std::chrono::milliseconds max_lease{30'000};
  // How long reading a pushed batch from the pusher may take.
  std::chrono::milliseconds push_timeout{30'000};
  size_t max_lease_sets = 4096;
};

struct RemoteServerStats {
  uint64_t queries = 0;
  uint64_t chunks_leased = 0;
  uint64_t lease_sets_held = 0;
  uint64_t refused = 0;          // malformed or over the limit
  uint64_t chunks_received = 0;  // pushed by peers and committed here
};

class RemoteServer {
 public:
  RemoteServer(HostTier& host, RemoteServerOptions options);

  void Attach(Transport* transport) { transport_.store(transport, std::memory_order_release); }

  // For PeerSetOptions::on_call: answers one remote-tier message.
  void Handle(PeerId peer, std::string request, Transport::Reply reply);

  RemoteServerStats Stats() const;

 private:
  struct LeaseSet {
    std::vector<ChunkLease> leases;
    std::chrono::steady_clock::time_point deadline;
  };

  absl::StatusOr<std::string> Query(std::string_view request);
  absl::StatusOr<std::string> Lease(std::string_view request);
  absl::StatusOr<std::string> Release(std::string_view request);
  // Answers through `reply` once every pushed chunk is committed or failed.
  void Push(PeerId peer, std::string_view request, Transport::Reply reply);
  void SweepExpired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HostTier& host_;
  const RemoteServerOptions options_;
  std::atomic<Transport*> transport_{nullptr};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, LeaseSet> lease_sets_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lease_id_ ABSL_GUARDED_BY(mu_) = 1;
  RemoteServerStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage::remote
