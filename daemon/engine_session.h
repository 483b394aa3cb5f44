// EngineSession is the daemon's side of one engine session: the handshake state, the layout
// the session speaks, and the reservations and leases it holds, keyed by handle ids it issued.
// It turns one EngineRequest into one EngineResponse against the tiered store; the socket
// plumbing lives in EngineSessionServer.
//
// A PrepareLoad whose chunks must come up from a lower tier, and a Lookup whose chain the remote
// tier asks peers about, are answered in two steps: Handle returns a deferred reply (nothing to
// send yet) and the store goes on with the request on its own thread; its result arrives through
// `completions` and Complete turns it into the response. While a request is deferred the session
// takes no other (the server stops reading it), so responses stay in request order.
//
// Not thread-safe: the session server's thread owns it. Destroying it aborts every open
// reservation and releases every lease it holds.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <memory>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "core/kv_layout.h"
#include "daemon/deferred_completions.h"
#include "daemon/lookup_accounting.h"
#include "daemon/node_identity.h"
#include "daemon/session_device_pool.h"
#include "daemon/session_streams.h"
#include "storage/device/device_pools.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/device_pool_tiering.h"
#include "storage/tiered/tiered_store.h"
#include "strata/v1/engine.pb.h"

namespace strata::daemon {

// What every session uses, owned elsewhere and outliving the sessions.
struct SessionResources {
  storage::TieredStore* store = nullptr;  // required
  // Where the store posts the loads it completes (required).
  std::shared_ptr<DeferredCompletions> completions;
  // Nullable: where the session's Lookups are counted (LookupSource::kEngine).
  LookupAccounting* lookups = nullptr;
  // KV events carry token ids: the handshake asks the connector to send each stored chunk's
  // tokens, and PrepareStore hands them to the host tier.
  bool kv_event_token_ids = false;
  // The node among its peers (handshake; LookupChainRequest.source_node). Nullable (no remote
  // tier); not owned; must outlive the session.
  const NodeIdentity* node = nullptr;
  // The device pools (T0) the handshake grants engines, one per layout. Nullable (no device
  // pool); not owned; must outlive the session.
  storage::DevicePools* device_pools = nullptr;
  // Promotes a pool acquire's misses from the host tier (storage/tiered/device_pool_tiering.h).
  // Nullable (misses stay misses); not owned; must outlive the session.
  storage::DevicePoolTiering* device_pool_tiering = nullptr;
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
    // With attach_arena_fd: the device pool's descriptor, passed after the arena's (-1: none).
    int device_pool_fd = -1;
    bool close_after = false;  // the session must end once the reply is sent
    // Nothing to send yet: the request went on in the store; Complete answers it.
    bool deferred = false;
  };

  EngineSession(uint64_t id, SessionResources resources, EngineSessionLimits limits);

  // Answers one request. Before a successful handshake only a handshake is accepted; a failed
  // handshake or a request out of order ends the session (close_after).
  Reply Handle(const v1::EngineRequest& request);
  // Answers the deferred request the completion names with what the store found for it.
  Reply Complete(DeferredCompletion completion);

  uint64_t id() const { return id_; }
  bool handshaken() const { return handshaken_; }
  const std::string& engine_id() const { return engine_id_; }
  size_t open_handles() const {
    return reservations_.size() + leases_.size() +
           (device_pool_ != nullptr ? device_pool_->open_handles() : 0);
  }
  // A request waits for the store: take no other request until Complete.
  bool deferred() const { return pending_.has_value(); }

 private:
  Reply Handshake(const v1::HandshakeRequest& request);
  // Grants the session's layout its device pool in the handshake's reply, when the daemon has
  // pools and this layout can have one (otherwise the reply goes without, and the log says why).
  void GrantDevicePool(Reply& reply);
  // Locates the chain; false when the remote tier went on asking peers (no response yet).
  absl::StatusOr<bool> Lookup(uint64_t request_id, const v1::LookupChainRequest& request,
                              v1::LookupChainResponse& response);
  // The lookup's answer (hit chunks) and its accounting, from the tiers its chain was found in.
  // Soft-pins the committed chunk `key` for `hold` (capped by the longest lease); a failure
  // (the chunk was evicted meanwhile) is only logged: a hold is best effort.
  void Hold(const ChunkKey& key, std::chrono::milliseconds hold);
  // OK for no source or a known one; kNotFound naming the node otherwise.
  absl::Status CheckSourceNode(std::string_view source) const;
  void AnswerLookup(const std::vector<storage::Tier>& tiers, size_t num_keys,
                    const std::string& tenant, uint64_t tokens, v1::LookupChainResponse& response);
  // Leases the chain's chunks; false when the load was deferred (no response yet).
  absl::StatusOr<bool> PrepareLoad(uint64_t request_id, const v1::PrepareLoadRequest& request,
                                   v1::PrepareLoadResponse& response);
  // One placement per key of a load of `num_keys` chunks: the leases, then the failure.
  void PlaceLoad(storage::LoadLeases leased, size_t num_keys, v1::PrepareLoadResponse& response);
  absl::Status PrepareStore(const v1::PrepareStoreRequest& request,
                            v1::PrepareStoreResponse& response);
  absl::Status Commit(const v1::HandlesRequest& request, v1::HandlesResponse& response);
  absl::Status Abort(const v1::HandlesRequest& request, v1::HandlesResponse& response);
  absl::Status Release(const v1::HandlesRequest& request, v1::HandlesResponse& response);
  // Announces written layers of streamed reservations to their streams.
  absl::Status LayersSaved(const v1::LayersSavedRequest& request);
  // The device pool requests (T0): position-independent keys of the session's layout.
  absl::Status PoolLookup(const v1::PoolLookupRequest& request, v1::PoolLookupResponse& response);
  absl::Status PoolAcquire(const v1::PoolAcquireRequest& request, v1::PoolChunksResponse& response);
  absl::Status PoolReserve(const v1::PoolReserveRequest& request, v1::PoolChunksResponse& response);
  // Keeps the chunks' importance (TieredStore::importance), all of it or (kInvalidArgument)
  // none.
  absl::Status PoolImportance(const v1::PoolImportanceRequest& request);
  // The keys of a device pool request; kFailedPrecondition when the session has no pool,
  // kInvalidArgument for keys that are not position-independent keys of its layout.
  absl::StatusOr<std::vector<ChunkKey>> PoolKeys(const v1::KeyChain& proto) const;
  // Queues the chain's lower-tier chunks for promotion and answers at once (no disk I/O); chunks
  // only peers hold are queued once the remote tier has asked them.
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

  const uint64_t id_;
  storage::TieredStore* const store_;
  storage::HostTier* const host_tier_;
  const std::shared_ptr<DeferredCompletions> completions_;
  LookupAccounting* const lookups_;
  const bool kv_event_token_ids_;
  const NodeIdentity* const node_;
  storage::DevicePools* const device_pools_;
  storage::DevicePoolTiering* const device_pool_tiering_;
  const EngineSessionLimits limits_;

  bool handshaken_ = false;
  std::string engine_id_;
  std::shared_ptr<const KvLayout> layout_;
  uint64_t fingerprint_ = 0;

  // The request the store is completing: a PrepareLoad or a Lookup, with what its answer needs.
  struct PendingRequest {
    uint64_t request_id = 0;
    size_t num_keys = 0;
    std::string tenant;   // Lookup
    uint64_t tokens = 0;  // Lookup
  };
  std::optional<PendingRequest> pending_;

  uint64_t next_handle_ = 1;
  absl::flat_hash_map<uint64_t, storage::WriteReservation> reservations_;
  // Reservations whose chunk is held once committed (StoreItem.hold_ms), by handle.
  absl::flat_hash_map<uint64_t, std::chrono::milliseconds> holds_;
  absl::flat_hash_map<uint64_t, storage::ChunkLease> leases_;
  // The layout's device pool, when the handshake granted one: its references and reservations.
  std::unique_ptr<SessionDevicePool> device_pool_;
  // The layer streams of this session's reservations (disaggregated prefill); only with a remote
  // tier. Declared last: its streams are aborted before the reservations are.
  std::optional<SessionStreams> streams_;
};

}  // namespace strata::daemon
