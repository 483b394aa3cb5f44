#include "storage/remote/layer_stream_sender.h"

#include <optional>
#include <string>
#include <utility>

#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/remote/internal/wire_status.h"

namespace strata::storage::remote {

struct LayerStreamSender::Stream {
  uint64_t id = 0;
  PeerId peer = 0;
  Deadline deadline;
  size_t num_chunks = 0;
  std::optional<std::string> open;  // the Open, until it is sent
  uint32_t ready = 0;               // layers written
  uint32_t sent_ready = 0;          // layers the receiver was told of
  std::optional<std::vector<uint64_t>> checksums;
  bool commit_sent = false;
  Done done;
  bool aborted = false;
  bool in_flight = false;
  absl::Status failed;
  // What to hand `done` once the stream is over.
  std::optional<absl::StatusOr<std::vector<absl::Status>>> result;
};

namespace {

// What Drive does next for a stream, decided under the lock and done outside it.
struct Step {
  std::optional<RemoteMessage> send;
  std::string payload;
  LayerStreamSender::Done done;
  std::optional<absl::StatusOr<std::vector<absl::Status>>> result;
};

}  // namespace

LayerStreamSender::LayerStreamSender(Transport& transport, LayerStreamSenderOptions options)
    : transport_(transport), options_(options) {}

LayerStreamSender::~LayerStreamSender() = default;

uint64_t LayerStreamSender::Open(PeerId peer, const KvLayout& layout,
                                 std::vector<PushedChunk> chunks, std::chrono::milliseconds hold) {
  auto stream = std::make_shared<Stream>();
  stream->peer = peer;
  stream->deadline = std::chrono::steady_clock::now() + options_.deadline;
  stream->num_chunks = chunks.size();
  {
    absl::MutexLock lock(&mu_);
    stream->id = next_stream_++;
    streams_.emplace(stream->id, stream);
  }
  stream->open = EncodeStreamOpen({.stream_id = stream->id,
                                   .hold_ms = static_cast<uint32_t>(hold.count()),
                                   .chunks = {.layout = layout, .chunks = std::move(chunks)}});
  Drive(stream);
  return stream->id;
}

void LayerStreamSender::LayersReady(uint64_t id, uint32_t layers_ready) {
  std::shared_ptr<Stream> stream;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    stream = it->second;
    stream->ready = std::max(stream->ready, layers_ready);
  }
  Drive(stream);
}

void LayerStreamSender::Commit(uint64_t id, std::vector<uint64_t> checksums, Done done) {
  std::shared_ptr<Stream> stream;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(id);
    if (it != streams_.end() && !it->second->checksums.has_value() && !it->second->aborted) {
      stream = it->second;
      stream->checksums = std::move(checksums);
      stream->done = std::move(done);
    }
  }
  if (stream == nullptr) {
    std::move(done)(absl::FailedPreconditionError(
        fmt::format("remote: stream {} is not open for a commit", id)));
    return;
  }
  Drive(stream);
}

void LayerStreamSender::Abort(uint64_t id) {
  std::shared_ptr<Stream> stream;
  {
    absl::MutexLock lock(&mu_);
    auto it = streams_.find(id);
    if (it == streams_.end() || it->second->checksums.has_value()) return;
    stream = it->second;
    stream->aborted = true;
  }
  Drive(stream);
}

void LayerStreamSender::Drive(const std::shared_ptr<Stream>& stream) {
  Step step;
  {
    absl::MutexLock lock(&mu_);
    if (stream->in_flight) return;
    const bool failed = !stream->failed.ok();
    if (stream->result.has_value() || (failed && stream->checksums.has_value()) ||
        (stream->aborted && (failed || stream->open.has_value()))) {
      // Over: the Commit's answer, a failure once the caller committed or aborted, or an Abort
      // with nothing to tell the receiver.
      streams_.erase(stream->id);
      if (stream->done) {
        step.done = std::move(stream->done);
        step.result = stream->result.has_value()
                          ? *std::move(stream->result)
                          : absl::StatusOr<std::vector<absl::Status>>(stream->failed);
      }
    } else if (failed) {
      // Nothing more goes out; the caller's Commit or Abort ends the stream.
    } else if (stream->aborted) {
      step.send = RemoteMessage::kStreamAbort;
      step.payload = EncodeStreamAbort({.stream_id = stream->id});
    } else if (stream->open.has_value()) {
      step.send = RemoteMessage::kStreamOpen;
      step.payload = *std::move(stream->open);
      stream->open.reset();
    } else if (stream->ready > stream->sent_ready) {
      step.send = RemoteMessage::kStreamLayers;
      step.payload = EncodeStreamLayers({.stream_id = stream->id, .layers_ready = stream->ready});
      stream->sent_ready = stream->ready;
    } else if (stream->checksums.has_value() && !stream->commit_sent) {
      step.send = RemoteMessage::kStreamCommit;
      step.payload = EncodeStreamCommit({.stream_id = stream->id, .checksums = *stream->checksums});
      stream->commit_sent = true;
    }
    if (step.send.has_value()) stream->in_flight = true;
  }
  if (step.done) std::move(step.done)(*std::move(step.result));
  if (!step.send.has_value()) return;
  const RemoteMessage sent = *step.send;
  transport_.Call(stream->peer, std::move(step.payload), stream->deadline,
                  [this, stream, sent](absl::StatusOr<std::string> reply) {
                    Answered(stream, sent, std::move(reply));
                  });
}

void LayerStreamSender::Answered(const std::shared_ptr<Stream>& stream, RemoteMessage sent,
                                 absl::StatusOr<std::string> reply) {
  absl::Status status = reply.status();
  absl::StatusOr<StreamReply> codes;
  if (status.ok() && (sent == RemoteMessage::kStreamOpen || sent == RemoteMessage::kStreamCommit)) {
    codes = DecodeStreamReply(sent, *reply);
    status = codes.status();
    if (status.ok() && codes->codes.size() != stream->num_chunks) {
      status = absl::DataLossError("remote: a stream answer for another number of chunks");
    }
  } else if (status.ok()) {
    status = DecodeStreamAck(sent, *reply);
  }
  {
    absl::MutexLock lock(&mu_);
    stream->in_flight = false;
    if (!status.ok()) {
      if (stream->failed.ok()) {
        stream->failed = Annotate(status, fmt::format("remote: stream {}", stream->id));
      }
    } else if (sent == RemoteMessage::kStreamCommit) {
      std::vector<absl::Status> chunks;
      for (int32_t code : codes->codes) chunks.push_back(internal::StatusFromWire(code, ""));
      stream->result = std::move(chunks);
    } else if (sent == RemoteMessage::kStreamAbort) {
      streams_.erase(stream->id);
      return;
    }
  }
  Drive(stream);
}

absl::flat_hash_map<PeerId, uint32_t> LayerStreamSender::OpenStreams() const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<PeerId, uint32_t> open;
  for (const auto& entry : streams_) ++open[entry.second->peer];
  return open;
}

}  // namespace strata::storage::remote
