#include "storage/remote/layer_stream_receiver.h"

#include <pthread.h>

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "fmt/format.h"
#include "storage/host/payload_view.h"
#include "storage/remote/internal/piece_pairing.h"
#include "storage/remote/internal/pushed_pages.h"

namespace strata::storage::remote {
namespace {

using Clock = std::chrono::steady_clock;

int32_t CodeOf(absl::StatusCode code) { return static_cast<int32_t>(code); }

uint64_t PieceBytes(const RemoteRange& piece) { return piece.length; }
uint64_t PieceBytes(const std::span<std::byte>& piece) { return piece.size(); }
RemoteRange SubPiece(const RemoteRange& piece, uint64_t at, uint64_t length) {
  return {.offset = piece.offset + at, .length = length};
}
std::span<std::byte> SubPiece(const std::span<std::byte>& piece, uint64_t at, uint64_t length) {
  return piece.subspan(at, length);
}

// The pieces covering bytes [offset, offset + length) of the payload `pieces` lay out in order;
// nullopt when the pieces end first.
template <class Piece>
std::optional<std::vector<Piece>> Slice(std::span<const Piece> pieces, uint64_t offset,
                                        uint64_t length) {
  std::vector<Piece> sliced;
  for (const Piece& piece : pieces) {
    if (length == 0) break;
    const uint64_t size = PieceBytes(piece);
    if (offset >= size) {
      offset -= size;
      continue;
    }
    const uint64_t take = std::min(size - offset, length);
    sliced.push_back(SubPiece(piece, offset, take));
    offset = 0;
    length -= take;
  }
  if (length > 0) return std::nullopt;
  return sliced;
}

}  // namespace

// One chunk of a stream: its reservation while it is being received.
struct StreamChunk {
  ChunkKey key;
  uint32_t num_tokens = 0;
  std::vector<RemoteRange> remote;  // its pages in the pusher's region
  std::optional<WriteReservation> reservation;
  std::vector<std::span<std::byte>> local;  // the reservation's pages
  int32_t code = 0;                         // not 0: declined or failed
  uint32_t reads_in_flight = 0;
  bool digest_queued = false;  // a Digest of it is queued or running
  std::vector<bool> landed;    // by layer
  uint32_t digested = 0;       // layers [0, digested) are in `checksum`
  // Touched by the Digest in progress alone, outside the lock; by Settle once none is queued.
  std::unique_ptr<ChecksumStream> checksum;

  // Whether anything still reads or writes its pages: its reservation stays until not.
  bool busy() const { return reads_in_flight > 0 || digest_queued; }
};

struct LayerStreamReceiver::Stream {
  StreamName name;
  KvLayout layout;
  std::chrono::milliseconds hold{0};
  Clock::time_point deadline;
  std::vector<StreamChunk> chunks;
  uint32_t layers_issued = 0;  // reads started for layers [0, layers_issued)
  uint32_t reads_in_flight = 0;
  uint32_t digests_queued = 0;
  std::optional<std::vector<uint64_t>> checksums;  // the Commit, once it came
  Transport::Reply commit_reply;
  std::optional<absl::Status> ending;  // aborted, expired or cut: why
  bool settled = false;
};

LayerStreamReceiver::LayerStreamReceiver(HostTier& host, internal::Landing& landing,
                                         LayerStreamReceiverOptions options)
    : host_(host), landing_(landing), options_(options) {
  expirer_ = std::jthread([this](std::stop_token stop) { ExpireLoop(stop); });
}

LayerStreamReceiver::~LayerStreamReceiver() {
  expirer_.request_stop();
  {
    absl::MutexLock lock(&mu_);
    wake_.SignalAll();
  }
  expirer_.join();
  // What is left has no read in flight (the transport is gone): its reservations abort as the
  // streams go.
}

bool LayerStreamReceiver::Handles(uint8_t type) {
  return type >= static_cast<uint8_t>(RemoteMessage::kStreamOpen) &&
         type <= static_cast<uint8_t>(RemoteMessage::kStreamAbort);
}

void LayerStreamReceiver::Handle(PeerId peer, uint8_t type, std::string_view request,
                                 Transport::Reply reply) {
  std::vector<PendingRead> reads;
  absl::StatusOr<std::string> answer = absl::InternalError("remote stream: unanswered");
  switch (static_cast<RemoteMessage>(type)) {
    case RemoteMessage::kStreamOpen:
      answer = Open(peer, request);
      break;
    case RemoteMessage::kStreamLayers:
      answer = Layers(peer, request, reads);
      break;
    case RemoteMessage::kStreamCommit:
      Commit(peer, request, std::move(reply));
      return;
    case RemoteMessage::kStreamAbort:
      answer = Abort(peer, request);
      break;
    default:
      answer = absl::InvalidArgumentError(fmt::format("remote: {} is no stream message", type));
  }
  if (!answer.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.refused;
  }
  std::move(reply)(std::move(answer));
  StartReads(std::move(reads));
}

absl::StatusOr<std::string> LayerStreamReceiver::Open(PeerId peer, std::string_view request) {
  absl::StatusOr<StreamOpen> open = DecodeStreamOpen(request);
  if (!open.ok()) return open.status();
  if (landing_.transport() == nullptr) {
    return absl::UnavailableError("remote: not taking streams yet");
  }
  auto stream = std::make_shared<Stream>();
  stream->name = {peer, open->stream_id};
  stream->layout = open->chunks.layout;
  stream->hold = std::min(std::chrono::milliseconds(open->hold_ms), options_.max_hold);
  stream->deadline = Clock::now() + options_.deadline;
  {
    absl::MutexLock lock(&mu_);
    if (streams_.contains(stream->name)) {
      return absl::AlreadyExistsError(
          fmt::format("remote: stream {} of this link is open already", open->stream_id));
    }
    if (streams_.size() >= options_.max_streams) {
      return absl::ResourceExhaustedError(
          fmt::format("remote: {} streams are open already", streams_.size()));
    }
  }
  const KvLayout& layout = stream->layout;
  StreamReply reply;
  stream->chunks.reserve(open->chunks.chunks.size());
  for (PushedChunk& pushed : open->chunks.chunks) {
    StreamChunk& chunk = stream->chunks.emplace_back();
    chunk.key = pushed.key;
    chunk.num_tokens = pushed.chunk.num_tokens;
    chunk.remote = std::move(pushed.ranges);
    if (!Slice(std::span<const RemoteRange>(chunk.remote), 0, pushed.chunk.payload_bytes)) {
      chunk.code = CodeOf(absl::StatusCode::kInvalidArgument);  // its pages end first
    } else {
      absl::StatusOr<internal::PushedPages> reserved =
          internal::ReservePushed(host_, layout, chunk.key, pushed.chunk);
      if (!reserved.ok()) {
        chunk.code = CodeOf(reserved.status().code());
      } else {
        chunk.local = std::move(reserved->parts);
        chunk.reservation = std::move(reserved->reservation);
        chunk.landed.assign(layout.num_layers, false);
        chunk.checksum = std::make_unique<ChecksumStream>();
      }
    }
    reply.codes.push_back(chunk.code);
  }
  absl::MutexLock lock(&mu_);
  // Checked again: another Open of the same name may have raced this one's reservations.
  if (!streams_.try_emplace(stream->name, stream).second) {
    return absl::AlreadyExistsError(
        fmt::format("remote: stream {} of this link is open already", open->stream_id));
  }
  ++stats_.streams_opened;
  for (const StreamChunk& chunk : stream->chunks) {
    if (!chunk.landed.empty()) ++incoming_[chunk.key];
  }
  wake_.SignalAll();
  return EncodeStreamReply(RemoteMessage::kStreamOpen, reply);
}

absl::StatusOr<std::string> LayerStreamReceiver::Layers(PeerId peer, std::string_view request,
                                                        std::vector<PendingRead>& reads) {
  absl::StatusOr<StreamLayers> layers = DecodeStreamLayers(request);
  if (!layers.ok()) return layers.status();
  absl::MutexLock lock(&mu_);
  auto it = streams_.find(StreamName{peer, layers->stream_id});
  if (it == streams_.end() || it->second->ending.has_value()) {
    return absl::FailedPreconditionError(
        fmt::format("remote: no open stream {} on this link", layers->stream_id));
  }
  const std::shared_ptr<Stream>& stream = it->second;
  if (layers->layers_ready > stream->layout.num_layers) {
    return absl::InvalidArgumentError(fmt::format("remote: {} layers ready of a {}-layer layout",
                                                  layers->layers_ready, stream->layout.num_layers));
  }
  ReadLayers(stream, layers->layers_ready, reads);
  return EncodeStreamAck(RemoteMessage::kStreamLayers);
}

void LayerStreamReceiver::Commit(PeerId peer, std::string_view request, Transport::Reply reply) {
  absl::StatusOr<StreamCommit> commit = DecodeStreamCommit(request);
  std::vector<PendingRead> reads;
  std::optional<std::pair<Transport::Reply, absl::StatusOr<std::string>>> answer;
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    auto it = commit.ok() ? streams_.find(StreamName{peer, commit->stream_id}) : streams_.end();
    if (!commit.ok()) {
      refused = commit.status();
    } else if (it == streams_.end() || it->second->ending.has_value() ||
               it->second->checksums.has_value()) {
      refused = absl::FailedPreconditionError(
          fmt::format("remote: no open stream {} on this link", commit->stream_id));
    } else if (commit->checksums.size() != it->second->chunks.size()) {
      refused = absl::InvalidArgumentError(
          fmt::format("remote: {} checksums for a stream of {} chunks", commit->checksums.size(),
                      it->second->chunks.size()));
    } else {
      const std::shared_ptr<Stream> stream = it->second;
      stream->checksums = std::move(commit->checksums);
      stream->commit_reply = std::move(reply);
      ReadLayers(stream, stream->layout.num_layers, reads);
      answer = Settle(stream);
    }
    if (!refused.ok()) ++stats_.refused;
  }
  if (!refused.ok()) {
    std::move(reply)(refused);
    return;
  }
  if (answer.has_value()) std::move(answer->first)(std::move(answer->second));
  StartReads(std::move(reads));
}

absl::StatusOr<std::string> LayerStreamReceiver::Abort(PeerId peer, std::string_view request) {
  absl::StatusOr<StreamAbort> abort = DecodeStreamAbort(request);
  if (!abort.ok()) return abort.status();
  std::optional<std::pair<Transport::Reply, absl::StatusOr<std::string>>> answer;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(StreamName{peer, abort->stream_id});
    // An unknown stream is taken as ended already: aborting is idempotent.
    if (it != streams_.end() && !it->second->ending.has_value()) {
      ++stats_.streams_aborted;
      answer = End(it->second, absl::AbortedError("remote: the pusher aborted the stream"));
    }
  }
  if (answer.has_value()) std::move(answer->first)(std::move(answer->second));
  return EncodeStreamAck(RemoteMessage::kStreamAbort);
}

void LayerStreamReceiver::PeerDown(PeerId peer) {
  std::vector<std::pair<Transport::Reply, absl::StatusOr<std::string>>> answers;
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::shared_ptr<Stream>> cut;
    for (const auto& [name, stream] : streams_) {
      if (name.first == peer && !stream->ending.has_value()) cut.push_back(stream);
    }
    for (const std::shared_ptr<Stream>& stream : cut) {
      ++stats_.streams_cut;
      auto answer = End(stream, absl::UnavailableError("remote: the pusher's link went down"));
      if (answer.has_value()) answers.push_back(std::move(*answer));
    }
  }
  for (auto& [reply, answer] : answers) std::move(reply)(std::move(answer));
}

void LayerStreamReceiver::ReadLayers(const std::shared_ptr<Stream>& stream, uint32_t to_layer,
                                     std::vector<PendingRead>& reads) {
  if (to_layer <= stream->layers_issued) return;
  const uint32_t from_layer = stream->layers_issued;
  stream->layers_issued = to_layer;
  for (size_t i = 0; i < stream->chunks.size(); ++i) {
    StreamChunk& chunk = stream->chunks[i];
    if (chunk.code != 0 || !chunk.reservation.has_value()) continue;
    const uint64_t layer_bytes = stream->layout.layer_bytes(chunk.num_tokens);
    const uint64_t offset = layer_bytes * from_layer;
    const uint64_t length = layer_bytes * (to_layer - from_layer);
    // Both sides cover the payload: Open checked the pusher's, Reserve sized ours.
    auto remote = Slice(std::span<const RemoteRange>(chunk.remote), offset, length);
    auto local = Slice(std::span<const std::span<std::byte>>(chunk.local), offset, length);
    absl::StatusOr<std::vector<Segment>> segments =
        remote.has_value() && local.has_value()
            ? internal::PairPieces(*remote, *local)
            : absl::StatusOr<std::vector<Segment>>(absl::DataLossError("pieces end early"));
    if (!segments.ok()) {
      chunk.code = CodeOf(segments.status().code());
      if (!chunk.busy()) chunk.reservation.reset();
      continue;
    }
    uint64_t bytes = 0;
    for (const Segment& segment : *segments) bytes += segment.local.size();
    ++chunk.reads_in_flight;
    ++stream->reads_in_flight;
    reads.push_back({.stream = stream,
                     .chunk = i,
                     .from_layer = from_layer,
                     .to_layer = to_layer,
                     .bytes = bytes,
                     .segments = *std::move(segments)});
  }
}

void LayerStreamReceiver::StartReads(std::vector<PendingRead> reads) {
  for (PendingRead& read : reads) {
    const PeerId peer = read.stream->name.first;
    const Clock::time_point deadline = read.stream->deadline;
    std::vector<Segment> segments = std::move(read.segments);
    auto shared = std::make_shared<PendingRead>(std::move(read));
    landing_.Read(peer, std::move(segments), deadline,
                  [this, shared](absl::Status status) { ReadDone(*shared, std::move(status)); });
  }
}

void LayerStreamReceiver::ReadDone(const PendingRead& read, absl::Status status) {
  std::optional<std::pair<Transport::Reply, absl::StatusOr<std::string>>> answer;
  bool digest = false;
  {
    absl::MutexLock lock(&mu_);
    Stream& stream = *read.stream;
    StreamChunk& chunk = stream.chunks[read.chunk];
    --chunk.reads_in_flight;
    --stream.reads_in_flight;
    if (!status.ok()) {
      if (chunk.code == 0) chunk.code = CodeOf(status.code());
    } else if (chunk.code == 0) {
      stats_.bytes_received += read.bytes;
      for (uint32_t l = read.from_layer; l < read.to_layer; ++l) chunk.landed[l] = true;
      if (!chunk.digest_queued && !stream.ending.has_value() &&
          chunk.digested < stream.layout.num_layers && chunk.landed[chunk.digested]) {
        chunk.digest_queued = true;
        ++stream.digests_queued;
        digest = true;
      }
    }
    if ((chunk.code != 0 || stream.ending.has_value()) && !chunk.busy()) {
      chunk.reservation.reset();
    }
    if (!digest) answer = Settle(read.stream);
  }
  if (digest) {
    landing_.Run([this, stream = read.stream, chunk = read.chunk] { Digest(stream, chunk); });
  }
  if (answer.has_value()) std::move(answer->first)(std::move(answer->second));
}

void LayerStreamReceiver::Digest(const std::shared_ptr<Stream>& stream, size_t index) {
  StreamChunk& chunk = stream->chunks[index];
  const uint32_t num_layers = stream->layout.num_layers;
  const uint64_t layer_bytes = stream->layout.layer_bytes(chunk.num_tokens);
  std::optional<std::pair<Transport::Reply, absl::StatusOr<std::string>>> answer;
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      const uint32_t from = chunk.digested;
      uint32_t to = from;
      while (to < num_layers && chunk.landed[to]) ++to;
      if (to == from || chunk.code != 0 || stream->ending.has_value()) break;
      // Landed layers are read no more and stay reserved while digest_queued: no lock needed.
      mu_.Unlock();
      auto layers = Slice(std::span<const std::span<std::byte>>(chunk.local), layer_bytes * from,
                          layer_bytes * (to - from));
      for (std::span<std::byte> piece : *layers) chunk.checksum->Update(piece);
      mu_.Lock();
      chunk.digested = to;
    }
    chunk.digest_queued = false;
    --stream->digests_queued;
    if ((chunk.code != 0 || stream->ending.has_value()) && !chunk.busy()) {
      chunk.reservation.reset();
    }
    answer = Settle(stream);
  }
  if (answer.has_value()) std::move(answer->first)(std::move(answer->second));
}

std::optional<std::pair<Transport::Reply, absl::StatusOr<std::string>>> LayerStreamReceiver::Settle(
    std::shared_ptr<Stream> stream) {
  if (stream->settled || stream->reads_in_flight > 0 || stream->digests_queued > 0) {
    return std::nullopt;
  }
  if (stream->ending.has_value()) {
    stream->settled = true;
    Erase(*stream);
    return std::nullopt;
  }
  if (!stream->checksums.has_value()) return std::nullopt;
  stream->settled = true;
  Erase(*stream);
  StreamReply reply;
  for (size_t i = 0; i < stream->chunks.size(); ++i) {
    StreamChunk& chunk = stream->chunks[i];
    if (chunk.reservation.has_value() && chunk.code == 0) {
      absl::Status stored;
      if (chunk.digested != stream->layout.num_layers ||
          chunk.checksum->Digest() != (*stream->checksums)[i]) {
        stored = absl::DataLossError("remote: a streamed chunk failed its checksum");
        chunk.reservation.reset();
      } else {
        stored = host_.Commit(*std::move(chunk.reservation), (*stream->checksums)[i]);
        chunk.reservation.reset();
      }
      if (stored.ok() && stream->hold.count() > 0) {
        // Best effort: a chunk evicted at once is found missing by the load, which fetches it.
        (void)host_.Pin(chunk.key, {.kind = PinKind::kSoft, .ttl = stream->hold});
      }
      chunk.code = CodeOf(stored.code());
      ++(stored.ok() ? stats_.chunks_received : stats_.chunks_failed);
    } else if (!chunk.landed.empty()) {  // reserved, then failed
      chunk.reservation.reset();
      ++stats_.chunks_failed;
    }
    reply.codes.push_back(chunk.code);
  }
  return std::make_pair(
      std::move(stream->commit_reply),
      absl::StatusOr<std::string>(EncodeStreamReply(RemoteMessage::kStreamCommit, reply)));
}

std::optional<std::pair<Transport::Reply, absl::StatusOr<std::string>>> LayerStreamReceiver::End(
    std::shared_ptr<Stream> stream, absl::Status why) {
  stream->ending = why;
  for (StreamChunk& chunk : stream->chunks) {
    if (chunk.landed.empty()) continue;  // never reserved
    ++stats_.chunks_failed;
    // A reservation with reads or a digest in flight is aborted once they are done (ReadDone,
    // Digest).
    if (!chunk.busy()) chunk.reservation.reset();
  }
  std::optional<std::pair<Transport::Reply, absl::StatusOr<std::string>>> answer;
  if (stream->checksums.has_value() && stream->commit_reply) {
    answer = std::make_pair(std::move(stream->commit_reply), absl::StatusOr<std::string>(why));
  }
  (void)Settle(stream);
  return answer;
}

void LayerStreamReceiver::Erase(const Stream& stream) {
  for (const StreamChunk& chunk : stream.chunks) {
    if (chunk.landed.empty()) continue;
    auto it = incoming_.find(chunk.key);
    if (it != incoming_.end() && --it->second == 0) incoming_.erase(it);
  }
  const StreamName name = stream.name;
  streams_.erase(name);
  if (!waiters_.empty()) wake_.SignalAll();  // they may be free to go
}

bool LayerStreamReceiver::AwaitIncoming(std::vector<ChunkKey> keys,
                                        std::chrono::milliseconds budget,
                                        absl::AnyInvocable<void() &&> done) {
  absl::MutexLock lock(&mu_);
  const bool brought = std::any_of(keys.begin(), keys.end(),
                                   [&](const ChunkKey& k) { return incoming_.contains(k); });
  if (!brought) return false;
  waiters_.push_back(
      {.keys = std::move(keys), .deadline = Clock::now() + budget, .done = std::move(done)});
  wake_.SignalAll();
  return true;
}

std::vector<absl::AnyInvocable<void() &&>> LayerStreamReceiver::ReadyWaiters(
    Clock::time_point now) {
  std::vector<absl::AnyInvocable<void() &&>> ready;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    const bool brought = std::any_of(it->keys.begin(), it->keys.end(),
                                     [&](const ChunkKey& k) { return incoming_.contains(k); });
    if (!brought || it->deadline <= now) {
      ready.push_back(std::move(it->done));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  return ready;
}

void LayerStreamReceiver::ExpireLoop(std::stop_token stop) {
  pthread_setname_np(pthread_self(), "strata-pd-recv");
  absl::MutexLock lock(&mu_);
  while (!stop.stop_requested()) {
    Clock::time_point next = Clock::time_point::max();
    const Clock::time_point now = Clock::now();
    std::vector<std::shared_ptr<Stream>> expired;
    for (const auto& [name, stream] : streams_) {
      if (stream->ending.has_value()) continue;
      if (stream->deadline <= now) {
        expired.push_back(stream);
      } else {
        next = std::min(next, stream->deadline);
      }
    }
    std::vector<std::pair<Transport::Reply, absl::StatusOr<std::string>>> answers;
    for (const std::shared_ptr<Stream>& stream : expired) {
      ++stats_.streams_expired;
      auto answer =
          End(stream,
              absl::DeadlineExceededError("remote: the stream was not committed by its deadline"));
      if (answer.has_value()) answers.push_back(std::move(*answer));
    }
    std::vector<absl::AnyInvocable<void()&&>> ready = ReadyWaiters(now);
    for (const Waiter& waiter : waiters_) next = std::min(next, waiter.deadline);
    if (!answers.empty() || !ready.empty()) {
      mu_.Unlock();
      for (auto& [reply, answer] : answers) std::move(reply)(std::move(answer));
      for (auto& done : ready) std::move(done)();
      mu_.Lock();
      continue;
    }
    if (next == Clock::time_point::max()) {
      wake_.Wait(&mu_);  // until a stream opens, a waiter comes, or the receiver stops
    } else {
      wake_.WaitWithTimeout(
          &mu_, absl::FromChrono(std::chrono::ceil<std::chrono::milliseconds>(next - now)));
    }
  }
}

LayerStreamStats LayerStreamReceiver::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

absl::flat_hash_map<PeerId, uint32_t> LayerStreamReceiver::OpenStreams() const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<PeerId, uint32_t> open;
  for (const auto& entry : streams_) ++open[entry.first.first];
  return open;
}

}  // namespace strata::storage::remote
