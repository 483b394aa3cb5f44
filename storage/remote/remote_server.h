// RemoteServer answers peers' remote-tier messages (remote_messages.h) from this daemon's host
// tier: Query (the leading chunks of a chain the host tier holds, with size, checksum and
// tokens), Lease (leases chunks for the requester to read from the arena, answering where their
// bytes lie) and Release. Chunks held only below the host tier are not served yet: a peer sees
// them as misses.
//
// Leases are HostTier::AcquireForCopy leases (a copy, not a load: no hit counted, the eviction
// policy untouched), kept by lease id until Release or their deadline; expired entries are swept
// on every call, so a requester that dies leaks nothing. At most `max_lease_sets` sets are held;
// beyond that a Lease is answered kResourceExhausted.
//
// Threading: Handle runs on the transport's thread; it takes the host tier's locks briefly and
// never waits for I/O. Thread-safe. The host tier must outlive the server.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "storage/host/host_tier.h"
#include "storage/remote/transport.h"

namespace strata::storage::remote {

struct RemoteServerOptions {
  // Longest lease a peer may ask for.
  std::chrono::milliseconds max_lease{30'000};
  size_t max_lease_sets = 4096;
};

struct RemoteServerStats {
  uint64_t queries = 0;
  uint64_t chunks_leased = 0;
  uint64_t lease_sets_held = 0;
  uint64_t refused = 0;  // malformed or over the limit
};

class RemoteServer {
 public:
  RemoteServer(HostTier& host, RemoteServerOptions options);

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
  void SweepExpired() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HostTier& host_;
  const RemoteServerOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, LeaseSet> lease_sets_ ABSL_GUARDED_BY(mu_);
  uint64_t next_lease_id_ ABSL_GUARDED_BY(mu_) = 1;
  RemoteServerStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage::remote
