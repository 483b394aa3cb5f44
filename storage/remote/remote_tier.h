// RemoteTier is T3 (DESIGN.md section 4): chunks that peer daemons hold, joined to the
// TieredStore as a LowerTier so loads and prefetches promote them into the host tier like disk
// chunks. It holds nothing itself; it remembers what peers said they hold.
//
//   - Query (and Discover, the store's way to it) asks every admitted peer serving the chain's
//   layout, in parallel, which leading
//     chunks of the chain it holds, and completes within the lookup budget with the longest run
//     any peer holds (zero when none answered in time: a slow or dead peer means no remote hits,
//     never a stall). What peers answered is remembered (bounded, with a TTL, and forgotten
//     when the peer's link goes down), so Lookup (in memory, as LowerTier requires) finds those
//     chunks for the load that follows.
//   - ReadBatch leases each chunk on the peer that holds it, reads the bytes straight into the
//     destination (the host tier's reserved arena pages) with Transport::Read, checks each
//     chunk's xxh3 checksum and lets the leases go. A chunk whose peer dies, times out or sends
//     bytes that fail the checksum fails alone (kUnavailable, kDeadlineExceeded, kDataLoss:
//     counted, forgotten); the load stops there and the engine recomputes. Pulling means no peer
//     ever writes into this daemon's memory.
//   - It takes no chunks: PutBatch answers kFailedPrecondition (pushing chunks to peers is
//     Move's, not demotion's). Remove and RemoveIf forget what peers said.
//
// Lifecycle: construct with the options, give to TieredStoreOptions::lower, then Attach the
// transport (over the host arena) and the PeerSet once they exist; until then every lookup
// misses. Threading: every method is thread-safe. Query never blocks; ReadBatch blocks its
// caller (the store's loads thread) until the fetch ends or times out. The transport and the
// PeerSet must outlive the tier's last call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "core/page_prefault.h"
#include "storage/remote/peer_set.h"
#include "storage/remote/remote_messages.h"
#include "storage/remote/transport.h"
#include "storage/tiered/lower_tier.h"

namespace strata::storage::remote {

struct RemoteTierOptions {
  // How long Query waits for peers' answers.
  std::chrono::microseconds lookup_budget{1000};
  // How long a fetch may take, from the lease request to the last byte.
  std::chrono::milliseconds fetch_timeout{5000};
  // Chunks remembered from peers' answers, and for how long.
  size_t remembered_chunks = 1u << 16;
  std::chrono::seconds remembered_for{30};
  // Told of every fetch from one peer (a batch of chunks): how long it took, from the lease
  // request to the last byte checked, and whether every chunk arrived. On the fetching thread;
  // may be empty.
  std::function<void(std::chrono::nanoseconds took, bool ok)> on_fetch;
};

class RemoteTier final : public LowerTier {
 public:
  explicit RemoteTier(RemoteTierOptions options);
  ~RemoteTier() override;

  // Starts using `transport` (created over `arena`, the host arena's pages) and `peers`.
  void Attach(Transport* transport, PeerSet* peers, const PrefaultedRegion& arena);
  // Forgets what `peer` said it holds (its link went down): lookups stop counting on it at once,
  // rather than when the load that follows fails.
  void ForgetPeer(PeerId peer);

  using QueryDone = absl::AnyInvocable<void(size_t remote_prefix) &&>;
  // Asks the peers serving `chain`'s layout which of its leading chunks they hold; `done` gets
  // the longest run any peer holds (starting at chain[0]), within `budget` (0: the options'
  // lookup budget). `done` runs on the transport's or the timer's thread, or at once when no
  // peer serves the layout.
  void Query(std::vector<ChunkKey> chain, QueryDone done,
             std::chrono::microseconds budget = std::chrono::microseconds(0));

  Tier tier() const override { return Tier::kRemote; }
  // Discover is Query, for the store's LocatePrefixOrAsk.
  bool discovers() const override { return true; }
  void Discover(std::vector<ChunkKey> chain, std::chrono::microseconds budget,
                DiscoverDone done) override;
  std::optional<ChunkInfo> Lookup(const ChunkKey& key) const override;
  // kFailedPrecondition: the chunks this tier reads are its peers'; list them on each peer.
  absl::StatusOr<ListPage> List(const ListOptions& options) const override;
  std::vector<absl::Status> PutBatch(std::span<const Put> puts) override;
  std::vector<absl::Status> ReadBatch(std::span<const ChunkKey> keys,
                                      std::span<const MutableParts> destinations) override;
  absl::StatusOr<bool> Remove(const ChunkKey& key) override;
  absl::StatusOr<RemoveResult> RemoveIf(
      absl::FunctionRef<bool(const ChunkKey&)> predicate) override;
  absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions) override;
  LowerTierStats Stats() const override;

  class QueryRound;

 private:
  struct Remembered {
    PeerId peer = 0;
    RemoteChunk chunk;
    std::chrono::steady_clock::time_point until;
    std::list<ChunkKey>::iterator age;  // in oldest_
  };

  void Remember(PeerId peer, std::span<const ChunkKey> chain, std::span<const RemoteChunk> held);
  void Forget(const ChunkKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Leases and reads `indices` of keys/destinations from `peer`; one status per index.
  std::vector<absl::Status> FetchFrom(PeerId peer, std::span<const ChunkKey> keys,
                                      std::span<const MutableParts> destinations,
                                      std::span<const size_t> indices);

  const RemoteTierOptions options_;
  Transport* transport_ = nullptr;  // set once by Attach, before any use
  PeerSet* peers_ = nullptr;
  const PrefaultedRegion* arena_ = nullptr;
  std::atomic<bool> attached_{false};

  mutable absl::Mutex mu_;
  absl::flat_hash_map<ChunkKey, Remembered> remembered_ ABSL_GUARDED_BY(mu_);
  uint64_t remembered_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // their payload bytes
  std::list<ChunkKey> oldest_ ABSL_GUARDED_BY(mu_);     // remembered keys, oldest first
  LowerTierStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage::remote
