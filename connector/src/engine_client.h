// EngineClient is the connector's side of one engine session with the local daemon
// (proto/strata/v1/engine.proto over the daemon's Unix stream socket): it connects, handshakes
// with the layout, maps the host arena whose descriptor arrives with the handshake response, and
// sends one request at a time, each with a deadline.
//
// Failure model (the engine must never be taken down by the cache):
//   - A call that times out, or whose socket fails, drops the session: the socket is closed (the
//     daemon then releases every lease and aborts every reservation of the session), the client's
//     reference to the arena mapping is dropped, and the call fails (kDeadlineExceeded or
//     kUnavailable). The session is never reused after a timeout, because a late answer would
//     arrive as the answer to the next request.
//   - While disconnected, calls try to reconnect lazily, at most one attempt per backoff period
//     (reconnect_min_backoff, doubling up to reconnect_max_backoff, reset by a success); between
//     attempts they fail at once with kUnavailable.
//   - Handles are only meaningful on the session that issued them: results carry the session's
//     generation, and Commit / Abort / Release for a generation that is gone fail with kAborted
//     without being sent.
//   - A daemon's whole-request error status is returned as is and keeps the session.
//
// Thread-safety: thread-safe; calls are serialized by a mutex (one outstanding request per
// session), so a call may wait for another thread's call to finish first. A call's timeout counts
// from its start, lock wait included; a call whose deadline passes before its request is sent
// fails with kDeadlineExceeded and leaves the session up (nothing was sent).
//
// Ownership: the client owns the socket. The arena mapping is shared: results hold a reference
// and the mapping is unmapped when the last reference goes (after ArenaHooks::on_unmap), so
// copies in flight keep their memory even when the session drops under them. The device pool
// (T0) a handshake grants is mapped the same way, through EngineClientOptions::device_runtime,
// and held the same way by the results of pool calls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/background_prefault.h"
#include "core/chunk_key.h"
#include "core/clock.h"
#include "core/kv_layout.h"
#include "core/page_prefault.h"
#include "core/scoped_fd.h"
#include "core/stored_encoding.h"
#include "storage/device/device_pool.h"
#include "storage/device/device_runtime.h"
#include "storage/device/device_runtime_factory.h"
#include "strata/connector.h"

namespace strata::v1 {
class EngineRequest;
class EngineResponse;
class HandshakeResponse;
}  // namespace strata::v1

namespace strata::connector::internal {

// A byte range of the shared arena.
struct ArenaExtent {
  uint64_t offset = 0;
  uint64_t length = 0;

  friend bool operator==(const ArenaExtent&, const ArenaExtent&) = default;
};

// Called when an arena is mapped and before it is unmapped (the worker registers the arena with
// its DeviceRuntime so copies are DMA). Both run on the thread that maps / drops the last
// reference. A failing on_map is logged and the arena is used unregistered; on_unmap is called
// only for mappings whose on_map succeeded.
struct ArenaHooks {
  std::function<absl::Status(void* base, uint64_t size_bytes)> on_map;
  std::function<void(void* base)> on_unmap;
};

// The host arena of one session mapped into this process (MAP_SHARED, read-write). A thread of
// its own maps the pages the daemon has allocated into this mapping from the start
// (core/background_prefault.h, kResidentOnly: nothing is allocated, or charged, here), so that
// first stores do not fault page by page; destruction stops it.
class ArenaMapping {
 public:
  ArenaMapping(std::byte* base, uint64_t size_bytes, uint64_t generation, ArenaHooks hooks,
               bool registered);
  ArenaMapping(const ArenaMapping&) = delete;
  ArenaMapping& operator=(const ArenaMapping&) = delete;
  ~ArenaMapping();

  std::byte* base() const { return base_; }
  uint64_t size_bytes() const { return size_bytes_; }
  uint64_t generation() const { return generation_; }
  // True when [offset, offset + length) lies inside the arena.
  bool Contains(uint64_t offset, uint64_t length) const {
    return offset <= size_bytes_ && length <= size_bytes_ - offset;
  }
  // Whether on_map registered it (a device runtime with host_registration page-locks it: every
  // page is in).
  bool registered() const { return registered_; }
  // Faults the pages under `extent` (inside the arena) into this mapping ahead of a copy that will
  // write or read them, skipping the granules faulted in before (core/page_prefault.h's
  // PrefaultedRegion: the daemon never gives the arena's pages back). Thread-safe.
  void Prefault(const ArenaExtent& extent, bool for_write) const;
  // Bytes the background thread has mapped in so far.
  uint64_t prefaulted_bytes() const;

 private:
  std::byte* const base_;
  const uint64_t size_bytes_;
  const uint64_t generation_;
  const ArenaHooks hooks_;
  const bool registered_;
  const PrefaultedRegion pages_;
  std::unique_ptr<BackgroundPrefault> background_;
};

struct LoadPlacement {
  absl::Status status;  // non-OK: nothing leased, recompute
  uint64_t handle = 0;
  uint64_t size_bytes = 0;
  std::vector<ArenaExtent> extents;  // the payload in order
  uint64_t checksum = 0;             // xxh3-64 of the payload (of the frame when encoded)
  // Encoded: the payload is a codec's frame, which the caller asked to decode itself
  // (PrepareLoad's decoded_codecs); plain otherwise.
  StoredEncoding encoding;
};

enum class StoreDisposition {
  kReserved,        // write the payload into `extents`, then Commit (or Abort)
  kAlreadyPresent,  // nothing to write
  kInProgress,      // another writer stores it; nothing to write
};

struct StorePlacement {
  absl::Status status;  // non-OK: nothing reserved, skip the chunk
  StoreDisposition disposition = StoreDisposition::kReserved;
  uint64_t handle = 0;
  uint64_t size_bytes = 0;
  std::vector<ArenaExtent> extents;
  // The daemon streams the reservation to a peer (StoreItem::stream_to): tell it of each layer
  // written (LayersSaved).
  bool streamed = false;
};

struct StoreItem {
  ChunkKey key;
  uint32_t num_tokens = 0;
  ChunkKey parent;  // empty for the first chunk of a chain
  // The request's tenant salt ("" for none): the daemon may bound each tenant's share.
  std::string tenant;
  // Keep the committed chunk in the daemon's host tier at least this long (StoreItem.hold_ms).
  uint32_t hold_ms = 0;
  // Stream the chunk to this peer daemon as its layers are written (disaggregated prefill).
  std::string_view stream_to;
  // The chunk's tokens (num_tokens of them): sent only when the daemon asked at handshake (it
  // publishes KV events with token ids), so they cost nothing otherwise. Must outlive the call.
  std::span<const uint32_t> token_ids;
};

// The device pool (T0) a handshake granted the session's layout: its geometry, how many tokens
// one page holds, and which runtime backend made it ("host", "cuda").
struct DevicePoolGrant {
  std::string backend;
  storage::DevicePoolGeometry geometry;
  uint32_t block_tokens = 0;
};

// The granted device pool mapped in this process (DeviceRuntime::OpenShared): page p of layer l
// lies at base() + geometry.offset(l, p). Unmapped when the last reference goes.
class DevicePoolMapping {
 public:
  DevicePoolMapping(DevicePoolGrant grant, std::unique_ptr<storage::DeviceAllocation> memory,
                    uint64_t generation)
      : grant_(std::move(grant)), memory_(std::move(memory)), generation_(generation) {}
  DevicePoolMapping(const DevicePoolMapping&) = delete;
  DevicePoolMapping& operator=(const DevicePoolMapping&) = delete;

  std::byte* base() const { return static_cast<std::byte*>(memory_->data()); }
  const DevicePoolGrant& grant() const { return grant_; }
  uint64_t generation() const { return generation_; }

 private:
  const DevicePoolGrant grant_;
  const std::unique_ptr<storage::DeviceAllocation> memory_;
  const uint64_t generation_;
};

// A chunk's pages in the device pool (PoolAcquire: read them in place until Release; PoolReserve:
// write every layer of them, then Commit or Abort). status non-OK: no handle, no pages.
struct PoolPlacement {
  absl::Status status;
  uint64_t handle = 0;
  std::vector<uint32_t> pages;  // in chunk order
  // A thinned chunk's (acquire only): each page's first token's position in the chunk,
  // ascending multiples of the pool's block_tokens. Empty: page i holds block i.
  std::vector<uint32_t> positions;
};

// A result valid on one session: its handles belong to session `generation`, its extents point
// into `arena` (null when the client does not map arenas), and its pool pages into `device_pool`
// (set for pool calls only).
template <class T>
struct SessionResult {
  uint64_t generation = 0;
  std::shared_ptr<const ArenaMapping> arena;
  T value;
  std::shared_ptr<const DevicePoolMapping> device_pool;
};

// EngineClientOptions::reply_spin's default: a lookup's reply takes tens of microseconds, and
// waking a halted core costs about as much again.
inline constexpr std::chrono::microseconds kDefaultReplySpin{150};

struct EngineClientOptions {
  std::string socket_path;
  std::string engine_id = "engine";
  // Sent at handshake; every key the client sends must carry its fingerprint.
  KvLayout layout;
  // The scheduler never copies bytes: it closes the arena descriptor instead of mapping it.
  bool map_arena = true;
  std::chrono::milliseconds reconnect_min_backoff{100};
  std::chrono::milliseconds reconnect_max_backoff{1000};
  ArenaHooks hooks;
  // Maps the device pool a handshake grants (OpenShared); not owned; must outlive the client.
  // Null: the grant is known (PoolLookup works) but not mapped, and PoolAcquire / PoolReserve
  // fail. A grant that cannot be mapped leaves the session up without a mapped pool (logged).
  storage::DeviceRuntime* device_runtime = nullptr;
  // Time source of the backoff; not owned; must outlive the client.
  const Clock* clock = SystemClock::Get();
  // How long a call polls for its reply before sleeping (RecvFrame's spin).
  std::chrono::microseconds reply_spin = kDefaultReplySpin;
};

// The session counters of `stats` as the connector's API reports them.
struct EngineClientStats;
SessionStats ToSessionStats(const EngineClientStats& stats);

struct EngineClientStats {
  uint64_t connects = 0;          // successful handshakes
  uint64_t connect_failures = 0;  // failed attempts
  uint64_t disconnects = 0;       // sessions dropped (socket errors, protocol errors, a daemon
                                  // that owes too many replies)
  uint64_t timeouts = 0;          // calls that ran past their deadline (the session stays)
  uint64_t late_replies = 0;      // replies that came after their call gave up, discarded
  uint64_t requests = 0;          // requests sent (handshakes excluded)
};

// The session options of a front end whose options name the daemon's socket, the engine, the
// layout, the reconnect backoffs and the clock (ConnectorOptions, PageStoreOptions); the caller
// adds hooks where it maps arenas.
template <class FrontEndOptions>
EngineClientOptions SessionOptions(const FrontEndOptions& options, bool map_arena) {
  EngineClientOptions session;
  session.socket_path = options.socket_path;
  session.engine_id = options.engine_id;
  session.layout = options.layout;
  session.map_arena = map_arena;
  session.reconnect_min_backoff = options.reconnect_min_backoff;
  session.reconnect_max_backoff = options.reconnect_max_backoff;
  session.clock = options.clock;
  return session;
}

// `runtime`; when it is null, a runtime of the front end's device_backend and device_ordinal
// (ConnectorOptions): kFailedPrecondition as CreateDeviceRuntime.
template <class FrontEndOptions>
absl::StatusOr<std::unique_ptr<storage::DeviceRuntime>> RuntimeOrDefault(
    const FrontEndOptions& options, std::unique_ptr<storage::DeviceRuntime> runtime) {
  if (runtime != nullptr) return runtime;
  return storage::CreateDeviceRuntime(
      {.backend = options.device_backend, .device_ordinal = options.device_ordinal});
}

// Who a lookup is for, for the daemon's lookup accounting (LookupChainRequest), and where its KV
// comes from.
struct LookupOrigin {
  std::string_view tenant;  // the request's tenant salt, "" for none
  uint32_t tokens = 0;      // tokens the keys' chunks cover; 0: every chunk full
  // Disaggregated prefill: the node that produced the KV; the daemon answers kNotFound when it
  // is not an admitted peer. Empty: any.
  std::string_view source_node;
};

// The daemon's node among its peers (HandshakeResponse); empty without a remote tier.
struct DaemonNode {
  std::string node_id;
  std::string remote_address;
};

// A lookup's answer: the leading chunks the daemon has, and of those the leading ones in its
// host tier (a load of the rest waits for a lower tier: disk, or a peer).
struct LookupHit {
  uint32_t chunks = 0;
  uint32_t host_chunks = 0;  // <= chunks
};

class EngineClient {
 public:
  // Validates the options (layout, socket path); does not connect. kInvalidArgument otherwise.
  static absl::StatusOr<std::unique_ptr<EngineClient>> Create(EngineClientOptions options);
  EngineClient(const EngineClient&) = delete;
  EngineClient& operator=(const EngineClient&) = delete;
  ~EngineClient();

  // Connects now unless connected or inside the backoff period. OK once a session is up.
  absl::Status Connect(std::chrono::milliseconds timeout);
  // Drops the session, if any (as a failed call would). The next call may reconnect at once.
  void Disconnect();

  // How many leading keys of `keys` the daemon has, and where.
  absl::StatusOr<LookupHit> LookupChain(std::span<const ChunkKey> keys,
                                        std::chrono::milliseconds timeout,
                                        const LookupOrigin& origin = {});
  // Asks the daemon to promote the disk-resident chunks of `keys`' cached prefix into its host
  // tier in the background; returns how many chunks it queued (it answers before any disk I/O).
  // The daemon's errors (kResourceExhausted: its prefetch queue is full) and the call's.
  absl::StatusOr<uint32_t> Prefetch(std::span<const ChunkKey> keys,
                                    std::chrono::milliseconds timeout);
  // Leases `keys` for reading; one placement per key, in order. lease_ms 0: the daemon's default.
  // `verifies`: the caller checks each placement's checksum as it copies, so the daemon does
  // not check first. `decoded_codecs`: the codecs whose frames the caller decodes itself, so a
  // chunk the daemon holds in one of them is placed as it is (LoadPlacement::encoding); empty:
  // every chunk is placed plain. A placement in any other codec is failed (kInternal).
  absl::StatusOr<SessionResult<std::vector<LoadPlacement>>> PrepareLoad(
      std::span<const ChunkKey> keys, uint32_t lease_ms, std::chrono::milliseconds timeout,
      bool verifies = false, CodecSet decoded_codecs = {});
  // Reserves space for `items`; one placement per item, in order.
  absl::StatusOr<SessionResult<std::vector<StorePlacement>>> PrepareStore(
      std::span<const StoreItem> items, std::chrono::milliseconds timeout);
  // One status per handle, in order. kAborted (nothing sent) when session `generation` is gone.
  // `checksums`: empty, or the payload checksum of each handle's chunk as the caller wrote it.
  absl::StatusOr<std::vector<absl::Status>> Commit(uint64_t generation,
                                                   std::span<const uint64_t> handles,
                                                   std::chrono::milliseconds timeout,
                                                   std::span<const uint64_t> checksums = {});
  // Layers [0, layers) of the streamed reservations `handles` are written. kAborted (nothing
  // sent) when session `generation` is gone; the daemon's errors and the call's.
  absl::Status LayersSaved(uint64_t generation, std::span<const uint64_t> handles, uint32_t layers,
                           std::chrono::milliseconds timeout);
  absl::StatusOr<std::vector<absl::Status>> Abort(uint64_t generation,
                                                  std::span<const uint64_t> handles,
                                                  std::chrono::milliseconds timeout);
  absl::StatusOr<std::vector<absl::Status>> Release(uint64_t generation,
                                                    std::span<const uint64_t> handles,
                                                    std::chrono::milliseconds timeout);

  // Position-independent chunks in the session's device pool (T0). `keys` are PicKeys of the
  // layout. Each call fails with the daemon's kFailedPrecondition when the session has no pool.
  // Which of `keys` the pool holds now, one per key (no reference is taken).
  absl::StatusOr<std::vector<bool>> PoolLookup(std::span<const ChunkKey> keys,
                                               std::chrono::milliseconds timeout);
  // A reference to each resident key's pages; kNotFound per key that is not resident. Release
  // each handle when done reading. kFailedPrecondition (nothing sent) when this process has not
  // mapped the session's pool.
  absl::StatusOr<SessionResult<std::vector<PoolPlacement>>> PoolAcquire(
      std::span<const ChunkKey> keys, std::chrono::milliseconds timeout);
  // num_pages[i] pages for keys[i] (all or none per key): write them, then Commit (or Abort)
  // each handle. Per key: kAlreadyExists (resident: acquire it), kAborted (another writer),
  // kResourceExhausted (admission refused it), kInvalidArgument. kFailedPrecondition (nothing
  // sent) as PoolAcquire; kInvalidArgument when the sizes of keys and num_pages differ.
  absl::StatusOr<SessionResult<std::vector<PoolPlacement>>> PoolReserve(
      std::span<const ChunkKey> keys, std::span<const uint32_t> num_pages,
      std::chrono::milliseconds timeout);
  // Reports what the engine measured of the chunks `keys`: importance[i] holds one value per token
  // of keys[i] (engine.proto's PoolImportanceRequest). The daemon's errors (kInvalidArgument:
  // nothing kept) and the call's.
  absl::Status PoolImportance(std::span<const ChunkKey> keys,
                              std::span<const std::span<const float>> importance,
                              std::chrono::milliseconds timeout);
  // The current session's device pool grant; nullopt when disconnected or granted none.
  std::optional<DevicePoolGrant> device_pool() const;

  bool connected() const;
  // Generation of the current session; 0 when disconnected. Every new session gets a new one.
  uint64_t generation() const;
  // The current session's daemon-assigned id; 0 when disconnected.
  uint64_t session_id() const;
  // What the last successful handshake said of the daemon's node ({} before the first).
  DaemonNode daemon_node() const;
  EngineClientStats stats() const;
  // ArenaMapping::prefaulted_bytes of the session's arena; 0 without one.
  uint64_t arena_prefaulted_bytes() const;
  const KvLayout& layout() const { return options_.layout; }

 private:
  explicit EngineClient(EngineClientOptions options);

  absl::Status EnsureConnectedLocked(MonoTime deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status HandshakeLocked(MonoTime deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends `request` and returns the response whose body is `expected_body` (a
  // v1::EngineResponse::BodyCase). A deadline that passes before any byte of the reply arrived
  // fails the call alone: the reply is owed, and discarded when it comes (ReceiveReplyLocked).
  // Drops the session on socket and protocol errors, and when more than kMaxOwedReplies are
  // owed (a daemon that no longer answers).
  absl::StatusOr<v1::EngineResponse> CallLocked(v1::EngineRequest& request, int expected_body,
                                                MonoTime deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads frames until the reply to `request_id`, discarding owed late replies on the way.
  absl::StatusOr<v1::EngineResponse> ReceiveReplyLocked(uint64_t request_id, int request_body,
                                                        MonoTime deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a late reply granted that nobody will use (leases, reservations): kept to be given
  // back by SettleLateGrantsLocked.
  void KeepLateGrantsLocked(int request_body, const v1::EngineResponse& response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the leases and aborts the reservations of late replies (before the next call).
  void SettleLateGrantsLocked(MonoTime deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `checksums`: sent with a commit (HandlesRequest.checksums); empty otherwise.
  absl::StatusOr<std::vector<absl::Status>> HandlesCallLocked(
      int which, uint64_t generation, std::span<const uint64_t> handles, MonoTime deadline,
      std::span<const uint64_t> checksums = {}) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pool calls' shared half: sends `request`, checks one chunk per key (each chunk's pages
  // inside the pool, `num_pages` of them when given) and returns them with the mapping.
  absl::StatusOr<SessionResult<std::vector<PoolPlacement>>> PoolChunksCallLocked(
      v1::EngineRequest& request, size_t num_keys, std::span<const uint32_t> num_pages,
      MonoTime deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the handshake's device pool grant and maps it when the options say so; an error
  // refuses the handshake only when the daemon's grant contradicts itself.
  absl::Status AcceptDevicePoolLocked(const v1::HandshakeResponse& body,
                                      std::span<const ScopedFd> passed_fds, uint64_t generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropSessionLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The daemon broke the protocol (`what` it did): drops the session (kInternal, logged) and
  // returns the kUnavailable the caller answers with.
  absl::Status ProtocolErrorLocked(std::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  MonoTime DeadlineIn(std::chrono::milliseconds timeout) const;

  const EngineClientOptions options_;
  const uint64_t fingerprint_;

  mutable absl::Mutex mu_;
  ScopedFd socket_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const ArenaMapping> arena_ ABSL_GUARDED_BY(mu_);
  std::optional<DevicePoolGrant> device_pool_grant_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const DevicePoolMapping> device_pool_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // of the current session; 0 when none
  uint64_t last_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t session_id_ ABSL_GUARDED_BY(mu_) = 0;
  // The current session's daemon wants StoreItem token ids (HandshakeResponse).
  bool send_token_ids_ ABSL_GUARDED_BY(mu_) = false;
  DaemonNode daemon_node_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Requests of this session whose caller gave up before the reply (id, request body case), in
  // the order sent; and what their late replies granted, to be given back.
  static constexpr size_t kMaxOwedReplies = 64;
  std::vector<std::pair<uint64_t, int>> owed_replies_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> late_leases_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> late_reservations_ ABSL_GUARDED_BY(mu_);
  MonoTime next_attempt_ ABSL_GUARDED_BY(mu_){0};
  std::chrono::milliseconds backoff_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  bool warned_ ABSL_GUARDED_BY(mu_) = false;  // a failure was logged since the last success
  EngineClientStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::connector::internal
