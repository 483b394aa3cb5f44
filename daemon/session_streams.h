// SessionStreams is one engine session's outbound layer streams (disaggregated prefill,
// storage/remote/layer_stream_sender.h): the reservations a prefiller's PrepareStore asks to
// stream to its decoder's daemon (StoreItem.stream_to) make one stream per PrepareStore and
// target; LayersSaved announces their written layers; once the session has settled every
// reservation of a stream, the stream is committed with their checksums, or aborted when any of
// them was aborted (its chunks are then fetched by the decoder as any chunk a peer holds).
//
// Until the peer answers a commit, the committed chunks are held by copy leases, so their pages
// stay as the peer reads them. A chunk the peer committed has its prefiller-side hold (the soft
// pin of StoreItem.hold_ms) lifted: the decoder's daemon has it now. A stream that fails leaves
// the hold to expire, so the decoder can still fetch the chunk.
//
// Threading: not thread-safe; the session's thread drives it. The peer's answer runs on the
// transport's thread and touches only the host tier and the leases it owns.
// Lifetime: the remote node and the host tier must outlive it and every answer it waits for;
// destroying it aborts the streams not yet committed (the session is going: its reservations are
// aborted too).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/host/host_tier.h"
#include "storage/remote/remote_node.h"

namespace strata::daemon {

class SessionStreams {
 public:
  SessionStreams(storage::remote::RemoteNode& node, storage::HostTier& host);
  ~SessionStreams();

  SessionStreams(const SessionStreams&) = delete;
  SessionStreams& operator=(const SessionStreams&) = delete;

  // During a PrepareStore: reservation `handle` (of `num_tokens` tokens) streams to `target`.
  void Add(std::string_view target, uint64_t handle, const storage::WriteReservation& reservation,
           uint32_t num_tokens);
  // The end of that PrepareStore: opens one stream per target for what Add gathered. Returns the
  // handles that stream (a stream that could not open, for lack of the peer, streams nothing).
  std::vector<uint64_t> Open(const KvLayout& layout, std::chrono::milliseconds hold);
  // Layers [0, layers) of the reservations `handles` are written; handles that do not stream
  // are ignored.
  void LayersSaved(std::span<const uint64_t> handles, uint32_t layers);
  // The session committed `handle` with `checksum` (or failed to: `committed` says why), or
  // aborted it (`committed` not OK). Commits or aborts the stream once all of it is settled.
  void Settled(uint64_t handle, const absl::Status& committed, uint64_t checksum);
  bool Streams(uint64_t handle) const { return by_handle_.contains(handle); }

 private:
  struct Pending {
    std::string target;
    std::vector<uint64_t> handles;
    std::vector<storage::remote::PushedChunk> chunks;
  };
  struct Out {
    uint64_t stream = 0;
    std::vector<ChunkKey> keys;
    std::vector<uint64_t> checksums;
    size_t unsettled = 0;
    bool failed = false;
  };

  storage::remote::RemoteNode& node_;
  storage::HostTier& host_;
  std::vector<Pending> pending_;                // this PrepareStore's, by target
  absl::flat_hash_map<uint64_t, Out> streams_;  // by stream id, until committed or aborted
  // Handle -> its stream and index in it.
  absl::flat_hash_map<uint64_t, std::pair<uint64_t, size_t>> by_handle_;
};

}  // namespace strata::daemon
