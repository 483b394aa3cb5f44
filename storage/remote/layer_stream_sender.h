// LayerStreamSender is the pushing side of a layer stream (layer_stream_receiver.h says what the
// receiver does with each message): this daemon names chunks its engine is writing into reserved
// pages of the host arena (Open), says how many of their layers are written as the engine saves
// them (LayersReady), then gives their checksums once every layer is written (Commit) or gives
// up (Abort). The receiving peer reads the bytes from this node's arena itself.
//
// Messages of one stream go one at a time, in order: a LayersReady that comes while a message is
// in flight is folded into the next (only the highest count is sent), so a slow link never
// queues more than one message a stream. The first message that fails (the peer refused it, its
// link went down, its deadline passed) fails the stream: what follows is not sent, and Commit
// reports that failure.
//
// Memory contract: the chunks' pages must stay as they are (reserved, or committed and leased)
// until Commit's `done` has run or Abort was called; the receiver may read them until then. Pages
// given back earlier make the receiver read whatever lands there, which its checksum check
// rejects: nothing wrong is ever committed, the transfer is only lost.
//
// Every stream ends with Commit or Abort; until one of them the sender keeps it (a failed stream
// too, so that Commit reports why it failed).
//
// Threading: every method is thread-safe and never blocks; `done` runs on the transport's thread
// (or the caller's, for a stream that failed already). Lifetime: the transport must outlive the
// sender's last call; destroy the sender after the transport (its calls' replies reach it until
// then).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "storage/remote/remote_messages.h"
#include "storage/remote/transport.h"

namespace strata::storage::remote {

struct LayerStreamSenderOptions {
  // Every message of a stream must be answered by this long after its Open.
  std::chrono::milliseconds deadline{30'000};
};

class LayerStreamSender {
 public:
  LayerStreamSender(Transport& transport, LayerStreamSenderOptions options);
  ~LayerStreamSender();

  LayerStreamSender(const LayerStreamSender&) = delete;
  LayerStreamSender& operator=(const LayerStreamSender&) = delete;

  // What the receiver answered to the Open and the Commit: one status per chunk of the Open.
  using Done = absl::AnyInvocable<void(absl::StatusOr<std::vector<absl::Status>> chunks) &&>;

  // Opens a stream of `chunks` (of `layout`; their ranges in this node's region) to `peer`,
  // whose daemon holds each committed chunk for `hold`. Returns the stream's id.
  uint64_t Open(PeerId peer, const KvLayout& layout, std::vector<PushedChunk> chunks,
                std::chrono::milliseconds hold);
  // Layers [0, layers_ready) of every chunk of the stream are written. Counts never go down.
  void LayersReady(uint64_t stream, uint32_t layers_ready);
  // Every layer is written; `checksums` (one per chunk, in order) are the payloads' xxh3-64.
  // `done` gets each chunk's status on the receiver: OK (committed there), kAlreadyExists (it
  // held the chunk), or why it failed; or the stream's failure as a whole.
  void Commit(uint64_t stream, std::vector<uint64_t> checksums, Done done);
  // Ends the stream: the receiver commits none of it. Unknown or finished streams are ignored.
  void Abort(uint64_t stream);

  // The streams not yet ended (by Commit's answer or Abort), by the peer they go to.
  absl::flat_hash_map<PeerId, uint32_t> OpenStreams() const;

  struct Stream;

 private:
  // Sends the stream's next message if none is in flight, or ends it.
  void Drive(const std::shared_ptr<Stream>& stream);
  void Answered(const std::shared_ptr<Stream>& stream, RemoteMessage sent,
                absl::StatusOr<std::string> reply);

  Transport& transport_;
  const LayerStreamSenderOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Stream>> streams_ ABSL_GUARDED_BY(mu_);
  uint64_t next_stream_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace strata::storage::remote
