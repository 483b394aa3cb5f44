// EngineSessionServer serves the engine protocol (proto/strata/v1/engine.proto) on a Unix
// socket: it authenticates peers with SO_PEERCRED, hands each session the host arena's fd
// (SCM_RIGHTS) at handshake, and answers Lookup / PrepareLoad / PrepareStore / Commit / Abort /
// Release / Prefetch frames against the tiered store with per-chunk statuses.
//
// Threading: one owned thread (named "strata-sessions") runs an epoll loop over the listening
// socket and every session. Requests are answered inline from in-memory state, except a load
// whose chunks must come up from a lower tier and a lookup the remote tier asks peers about: the
// store goes on with it on its own thread, the session stops being read until the store's
// completion arrives (through DeferredCompletions, whose eventfd the loop watches), and the loop
// answers it then. So no engine's disk read or peer query ever holds up another engine's
// requests. Start, Stop and Stats are thread-safe.
//
// Ownership: each session owns the WriteReservations and ChunkLeases it was handed, keyed by
// per-session handle ids. When a session ends (clean close, crash of the engine, protocol
// error, or Stop) its reservations are aborted and its leases released: nothing it held
// outlives the socket. A malformed, truncated or oversized frame ends only that session, after
// an error response with request_id 0 when the socket still takes it.
#pragma once

#include <array>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/scoped_fd.h"
#include "daemon/deferred_completions.h"
#include "daemon/lookup_accounting.h"
#include "daemon/node_identity.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "storage/device/device_pools.h"
#include "storage/tiered/device_pool_tiering.h"
#include "storage/tiered/tiered_store.h"
#include "strata/v1/engine.pb.h"

namespace strata::daemon {

struct EngineSessionServerOptions {
  std::string socket_path;
  // Not owned; must outlive the server, and stop (running the loads it accepted) after the
  // server's Stop.
  storage::TieredStore* store = nullptr;
  // Where the engines' Lookups are counted; nullable; not owned; must outlive the server.
  LookupAccounting* lookups = nullptr;
  // Ask connectors for each stored chunk's token ids (SessionResources::kv_event_token_ids).
  bool kv_event_token_ids = false;
  // The node among its peers; default: no remote tier.
  NodeIdentity node;
  // The device pools the handshake grants (SessionResources::device_pools); nullable (none);
  // not owned; must outlive the server.
  storage::DevicePools* device_pools = nullptr;
  // What promotes pool misses from the host tier (SessionResources::device_pool_tiering);
  // nullable; not owned.
  storage::DevicePoolTiering* device_pool_tiering = nullptr;
  uint32_t max_sessions = 256;
  // Peer uids accepted besides the daemon's own uid and root.
  std::vector<uint32_t> allowed_uids;
  // A session whose engine does not read its responses within this time is closed.
  std::chrono::milliseconds send_timeout{1000};
  // Upper bound on a lease an engine may ask for.
  std::chrono::milliseconds max_lease{std::chrono::minutes(10)};
  // Upper bounds on one request and on one session's open handles (kResourceExhausted past it).
  uint32_t max_items_per_request = 65536;
  uint32_t max_handles_per_session = 1u << 20;
  // Nullable; must outlive the server. strata_engine_request_duration_seconds{op} (the time to
  // answer each engine request, by kind: load, store, commit, ...) is registered on it.
  prometheus::Registry* registry = nullptr;
};

struct EngineSessionStats {
  uint64_t active_sessions = 0;
  uint64_t total_sessions = 0;
  uint64_t rejected_sessions = 0;  // credentials or session limit
  uint64_t requests = 0;
  uint64_t protocol_errors = 0;  // sessions closed for malformed frames
};

class EngineSessionServer {
 public:
  // Creates the socket's directory if needed, replaces a stale socket file (one nobody listens
  // on), binds with mode 0660 and listens. kFailedPrecondition when another process serves the
  // path; kInvalidArgument for missing options.
  static absl::StatusOr<std::unique_ptr<EngineSessionServer>> Create(
      EngineSessionServerOptions options);

  EngineSessionServer(const EngineSessionServer&) = delete;
  EngineSessionServer& operator=(const EngineSessionServer&) = delete;
  // Stops (see Stop).
  ~EngineSessionServer();

  // Starts the session thread. Call once.
  void Start();
  // Stops accepting, finishes the request in hand, ends every session (releasing what they
  // hold), removes the socket file and joins the thread. Idempotent.
  void Stop();

  EngineSessionStats Stats() const;
  const std::string& socket_path() const { return options_.socket_path; }

 private:
  struct Session;

  EngineSessionServer(EngineSessionServerOptions options, ScopedFd listen_fd, ScopedFd epoll_fd,
                      ScopedFd wake_fd, std::shared_ptr<DeferredCompletions> completions);

  void Run(std::stop_token stop);
  void Accept();
  // Reads and answers what `session` sent; false when the session must end.
  bool ServeReadable(Session& session);
  // Answers the frames `session` has buffered, until one is deferred; false when the session
  // must end.
  bool ServeFrames(Session& session, bool& ok);
  // Answers the loads the store completed and resumes their sessions.
  void ServeCompletions();
  // Whether the loop reads `session`'s socket (not while its load is deferred).
  void WatchReadable(Session& session, bool readable);
  void CloseSession(uint64_t session_id);

  const EngineSessionServerOptions options_;
  const ScopedFd listen_fd_;
  const ScopedFd epoll_fd_;
  const ScopedFd wake_fd_;  // eventfd that wakes the loop for Stop
  const std::shared_ptr<DeferredCompletions> completions_;
  // Indexed by v1::EngineRequest::BodyCase; null without a registry. Read through Latency, which
  // answers null for a kind past the array's end (one a later protocol adds).
  std::array<prometheus::Histogram*, v1::EngineRequest::kPoolReserve + 1> request_latency_{};
  prometheus::Histogram* Latency(int body_case) const {
    return body_case >= 0 && static_cast<size_t>(body_case) < request_latency_.size()
               ? request_latency_[body_case]
               : nullptr;
  }

  // Touched only by the session thread.
  absl::flat_hash_map<uint64_t, std::unique_ptr<Session>> sessions_;
  uint64_t next_session_id_ = 1;

  std::atomic<uint64_t> active_sessions_{0};
  std::atomic<uint64_t> total_sessions_{0};
  std::atomic<uint64_t> rejected_sessions_{0};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> protocol_errors_{0};

  std::atomic<bool> stopped_{false};
  std::jthread thread_;  // last: joined before the members it uses are destroyed
};

}  // namespace strata::daemon
