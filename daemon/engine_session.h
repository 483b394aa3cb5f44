// EngineSession is the daemon's side of one engine session: the handshake state, the layout
// the session speaks, and the reservations and leases it holds, keyed by handle ids it issued.
// It turns one EngineRequest into one EngineResponse against the host tier; the socket
// plumbing lives in EngineSessionServer.
//
// Not thread-safe: the session server's thread owns it. Destroying it aborts every open
// reservation and releases every lease it holds.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "core/kv_layout.h"
#include "daemon/tenant_directory.h"
#include "storage/disk/demoter.h"
#include "storage/disk/disk_tier.h"
#include "storage/disk/promoter.h"
#include "storage/host/host_tier.h"
#include "strata/v1/engine.pb.h"

namespace strata::daemon {

// What every session uses, owned elsewhere and outliving the sessions.
struct SessionResources {
  storage::HostTier* host_tier = nullptr;  // required
  // Nullable (no disk tier): Lookup counts, and PrepareLoad promotes, the chunks that continue
  // the host tier's prefix on disk.
  storage::DiskTier* disk_tier = nullptr;
  // Nullable (no disk tier): queues the chunks a Prefetch names for background promotion.
  storage::DiskPromoter* promoter = nullptr;
  // Nullable: chunks it stages for their disk write count as disk hits and are promoted from
  // its buffers.
  const storage::DiskMover* mover = nullptr;
  // Nullable (no quotas): maps a store's tenant to its quota id.
  const TenantDirectory* tenants = nullptr;
  // KV events carry token ids: the handshake asks the connector to send each stored chunk's
  // tokens, and PrepareStore hands them to the host tier.
  bool kv_event_token_ids = false;
};

struct EngineSessionLimits {
  std::chrono::milliseconds max_lease{std::chrono::minutes(10)};
  uint32_t max_items_per_request = 65536;
  uint32_t max_handles = 1u << 20;
};

class EngineSession {
 public:
  struct Reply {
    v1::EngineResponse response;
    bool attach_arena_fd = false;  // the handshake succeeded: pass the arena fd with it
    bool close_after = false;      // the session must end once the reply is sent
  };

  EngineSession(uint64_t id, SessionResources resources, EngineSessionLimits limits);

  // Answers one request. Before a successful handshake only a handshake is accepted; a failed
  // handshake or a request out of order ends the session (close_after).
  Reply Handle(const v1::EngineRequest& request);

  uint64_t id() const { return id_; }
  bool handshaken() const { return handshaken_; }
  const std::string& engine_id() const { return engine_id_; }
  size_t open_handles() const { return reservations_.size() + leases_.size(); }

 private:
  Reply Handshake(const v1::HandshakeRequest& request);
  absl::Status Lookup(const v1::LookupChainRequest& request, v1::LookupChainResponse& response);
  absl::Status PrepareLoad(const v1::PrepareLoadRequest& request,
                           v1::PrepareLoadResponse& response);
  absl::Status PrepareStore(const v1::PrepareStoreRequest& request,
                            v1::PrepareStoreResponse& response);
  absl::Status Commit(const v1::HandlesRequest& request, v1::HandlesResponse& response);
  absl::Status Abort(const v1::HandlesRequest& request, v1::HandlesResponse& response);
  absl::Status Release(const v1::HandlesRequest& request, v1::HandlesResponse& response);
  // Queues the chain's disk-only chunks with the promoter and answers at once (no disk I/O).
  absl::Status Prefetch(const v1::PrefetchRequest& request, v1::PrefetchResponse& response);

  // Checks a batch of `items` against the per-request limit and, when it adds handles, against
  // the session's handle limit.
  absl::Status CheckBatch(int items, bool adds_handles = false) const;
  // Removes and returns an open reservation; kInvalidArgument for an unknown handle.
  absl::StatusOr<storage::WriteReservation> TakeReservation(uint64_t handle);
  // Parses a key and checks it belongs to this session's layout.
  absl::StatusOr<ChunkKey> SessionKey(const v1::ChunkKey& proto) const;
  // The keys of a packed chain of this session's layout (at most max_items_per_request);
  // kInvalidArgument otherwise.
  absl::StatusOr<std::vector<ChunkKey>> SessionChain(const v1::KeyChain& proto) const;
  uint64_t NextHandle() { return next_handle_++; }

  // The chunks of a load that one batched promotion covered: keys [first, first + size) and
  // what PromoteRunFromDisk did with each.
  struct PromotedRun {
    size_t first = 0;
    std::vector<absl::StatusOr<storage::PromoteOutcome>> outcomes;
    size_t end() const { return first + outcomes.size(); }
  };
  // Leases keys[i] of a load (led through in order), promoting it from the disk tier into the
  // host tier first when it is only there. The first such miss past `run` promotes it together
  // with the chunks after it that the host tier lacks (at most kPromotionRunChunks) in one
  // batch of reads, recorded in `run` for the chunks that follow. nullopt when neither tier has
  // it. `reader_verifies`: HostTier::Acquire's.
  absl::StatusOr<std::optional<storage::ChunkLease>> AcquireFromAnyTier(
      std::span<const ChunkKey> keys, size_t i, PromotedRun& run,
      std::optional<std::chrono::nanoseconds> lease, bool reader_verifies);

  const uint64_t id_;
  storage::HostTier* const host_tier_;
  storage::DiskTier* const disk_tier_;
  storage::DiskPromoter* const promoter_;
  const storage::DiskMover* const mover_;
  const TenantDirectory* const tenants_;
  const bool kv_event_token_ids_;
  const EngineSessionLimits limits_;

  bool handshaken_ = false;
  std::string engine_id_;
  KvLayout layout_;
  uint64_t fingerprint_ = 0;

  uint64_t next_handle_ = 1;
  absl::flat_hash_map<uint64_t, storage::WriteReservation> reservations_;
  absl::flat_hash_map<uint64_t, storage::ChunkLease> leases_;
};

}  // namespace strata::daemon
