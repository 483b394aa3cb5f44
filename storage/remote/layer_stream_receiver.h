// LayerStreamReceiver takes the chunks a peer streams to this daemon layer by layer while the
// peer's engine is still computing them (disaggregated prefill: the prefiller's daemon hands each
// layer of a request's chunks to the decoder's daemon as soon as its engine has saved it, so the
// transfer overlaps the prefill). The messages are remote_messages.h's Stream*:
//
//   Open   -> one host-tier reservation per chunk (a chunk held already, or being written by
//             someone else, is declined: kAlreadyExists / kAborted), answered per chunk.
//   Layers -> reads layers [done, layers_ready) of every reserved chunk from the pusher's pages
//             straight into the reservation (one Transport::Read per chunk, its pages faulted in
//             first), and digests each layer, in layer order, as soon as it has landed: the
//             checksum costs nothing at the end.
//   Commit -> reads the layers still missing, then checks each chunk's digest against the
//             checksum the pusher gives and commits it (soft-pinned for the Open's hold_ms,
//             capped by max_hold), answering per chunk: OK, kDataLoss (the bytes read differ from
//             what the pusher's engine wrote), or the read's failure (kUnavailable,
//             kDeadlineExceeded). Wrong KV is never committed.
//   Abort  -> every reservation of the stream is aborted; nothing of it is committed.
//
// Every stream has a deadline from its Open (`deadline`, [remote] pd_deadline_ms): a stream not
// committed by then is aborted (a pending Commit is answered kDeadlineExceeded), and so is every
// stream of a peer whose link goes down (PeerDown). A reservation is aborted only once no read
// into it is in flight, so no late byte lands in pages given back.
//
// Threading: Handle and PeerDown run on the transport's thread, reads complete there. The reads
// start, and the layers are digested, on the landing thread (internal/landing.h: it faults the
// pages in before a read starts), so the transport's thread only does the bookkeeping and keeps
// answering the links' health checks. A thread of the receiver's own ends expired streams and
// wakes waiters past their budget. Thread-safe; replies are sent outside the lock. Lifetime: the
// host tier and the landing must outlive the receiver; opens are refused kUnavailable while the
// landing has no transport. The transport must be destroyed before the receiver (its reads call
// back into it until then); the destructor aborts what is left.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "storage/host/host_tier.h"
#include "storage/remote/internal/landing.h"
#include "storage/remote/remote_messages.h"
#include "storage/remote/transport.h"

namespace strata::storage::remote {

struct LayerStreamReceiverOptions {
  // From Open to the last chunk committed ([remote] pd_deadline_ms).
  std::chrono::milliseconds deadline{30'000};
  // Longest hold a pusher may ask for.
  std::chrono::milliseconds max_hold{30'000};
  size_t max_streams = 1024;
};

struct LayerStreamStats {
  uint64_t streams_opened = 0;
  uint64_t streams_aborted = 0;  // by their pusher
  uint64_t streams_expired = 0;  // past their deadline
  uint64_t streams_cut = 0;      // their pusher's link went down
  uint64_t chunks_received = 0;  // committed
  uint64_t chunks_failed = 0;    // reserved, then not committed (read failed, checksum, commit)
  uint64_t bytes_received = 0;   // read from pushers, failed reads excluded
  uint64_t refused = 0;          // messages answered with an error
};

class LayerStreamReceiver {
 public:
  LayerStreamReceiver(HostTier& host, internal::Landing& landing,
                      LayerStreamReceiverOptions options);
  ~LayerStreamReceiver();

  LayerStreamReceiver(const LayerStreamReceiver&) = delete;
  LayerStreamReceiver& operator=(const LayerStreamReceiver&) = delete;

  // Whether `type` is one of the stream messages Handle answers.
  static bool Handles(uint8_t type);
  // Answers one stream message from `peer` (now, or once its reads are done: Commit).
  void Handle(PeerId peer, uint8_t type, std::string_view request, Transport::Reply reply);
  // The link to `peer` went down: its streams end.
  void PeerDown(PeerId peer);

  // Whether an open stream is bringing any of `keys` in: then `done` runs, on the receiver's
  // thread, once none is (the streams committed or ended) or `budget` has passed, and true is
  // returned; otherwise false, and `done` is dropped unrun (as it is when the receiver goes
  // first). For
  // a decoder's lookup, which should find the chunks its prefiller is still streaming.
  bool AwaitIncoming(std::vector<ChunkKey> keys, std::chrono::milliseconds budget,
                     absl::AnyInvocable<void() &&> done);

  LayerStreamStats Stats() const;
  // The streams open here (until committed or let go), by the peer pushing them.
  absl::flat_hash_map<PeerId, uint32_t> OpenStreams() const;

  struct Stream;

 private:
  using StreamName = std::pair<PeerId, uint64_t>;
  // A read to start once the lock is let go.
  struct PendingRead {
    std::shared_ptr<Stream> stream;
    size_t chunk = 0;
    uint32_t from_layer = 0;
    uint32_t to_layer = 0;
    uint64_t bytes = 0;
    std::vector<Segment> segments;
  };

  absl::StatusOr<std::string> Open(PeerId peer, std::string_view request);
  absl::StatusOr<std::string> Layers(PeerId peer, std::string_view request,
                                     std::vector<PendingRead>& reads);
  // Answers through `reply` once the stream's reads are done; an error at once.
  void Commit(PeerId peer, std::string_view request, Transport::Reply reply);
  absl::StatusOr<std::string> Abort(PeerId peer, std::string_view request);

  // Queues reads of layers [issued, to_layer) of each live chunk.
  void ReadLayers(const std::shared_ptr<Stream>& stream, uint32_t to_layer,
                  std::vector<PendingRead>& reads) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartReads(std::vector<PendingRead> reads);
  void ReadDone(const PendingRead& read, absl::Status status);
  // Digests the chunk's layers that have landed, in order, with no lock held while it reads them;
  // on the landing thread, queued by ReadDone (one at a time per chunk).
  void Digest(const std::shared_ptr<Stream>& stream, size_t chunk);
  // Commits the stream once its Commit has come and its reads are done, or lets it go once it is
  // ending and its reads are done; the reply to send, if any. Both take the stream by value: it
  // must outlive its erasure from streams_ within the call.
  std::optional<std::pair<Transport::Reply, absl::StatusOr<std::string>>> Settle(
      std::shared_ptr<Stream> stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the stream without committing: `why` answers a pending Commit.
  std::optional<std::pair<Transport::Reply, absl::StatusOr<std::string>>> End(
      std::shared_ptr<Stream> stream, absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLoop(std::stop_token stop);
  // The waiters whose keys no stream brings any more, or whose budget has passed, taken out.
  std::vector<absl::AnyInvocable<void() &&>> ReadyWaiters(std::chrono::steady_clock::time_point now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the stream and what it was bringing in (the caller holds it alive).
  void Erase(const Stream& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Waiter {
    std::vector<ChunkKey> keys;
    std::chrono::steady_clock::time_point deadline;
    absl::AnyInvocable<void() &&> done;
  };

  HostTier& host_;
  internal::Landing& landing_;
  const LayerStreamReceiverOptions options_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<StreamName, std::shared_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  LayerStreamStats stats_ ABSL_GUARDED_BY(mu_);
  // Chunks open streams reserved pages for, by how many streams.
  absl::flat_hash_map<ChunkKey, uint32_t> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  absl::CondVar wake_;  // a stream opened, or the receiver stops
  std::jthread expirer_;
};

}  // namespace strata::storage::remote
