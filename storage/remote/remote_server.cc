#include "storage/remote/remote_server.h"

#include <utility>

#include "core/page_prefault.h"
#include "fmt/format.h"
#include "storage/host/payload_view.h"
#include "storage/remote/internal/piece_pairing.h"
#include "storage/remote/internal/pushed_pages.h"
#include "storage/remote/remote_messages.h"

namespace strata::storage::remote {
namespace {

using Clock = std::chrono::steady_clock;

// How long a Query holds each chunk to read its description.
constexpr auto kDescribeLease = std::chrono::seconds(1);

}  // namespace

RemoteServerOptions ServingBelowHost(TieredStore& store, RemoteServerOptions options) {
  options.describe_below = [&store](const ChunkKey& key) { return store.DescribeBelowHost(key); };
  options.promote_below = [&store](std::vector<ChunkKey> keys, absl::AnyInvocable<void() &&> done) {
    return store.PromoteForPeer(std::move(keys), std::move(done));
  };
  return options;
}

RemoteServer::RemoteServer(HostTier& host, RemoteServerOptions options)
    : host_(host),
      options_(options),
      landing_(host.arena_pages()),
      streams_(host, landing_, options.streams) {}

void RemoteServer::Handle(PeerId peer, std::string request, Transport::Reply reply) {
  absl::StatusOr<uint8_t> type = MessageType(request);
  absl::StatusOr<std::string> answer = absl::InternalError("remote: unanswered");
  if (!type.ok()) {
    answer = type.status();
  } else if (LayerStreamReceiver::Handles(*type)) {
    streams_.Handle(peer, *type, request, std::move(reply));
    return;
  } else {
    switch (static_cast<RemoteMessage>(*type)) {
      case RemoteMessage::kQuery:
        answer = Query(request);
        break;
      case RemoteMessage::kLease:
        Lease(request, std::move(reply));
        return;
      case RemoteMessage::kRelease:
        answer = Release(request);
        break;
      case RemoteMessage::kPush:
        Push(peer, request, std::move(reply));
        return;
      default:
        answer = absl::InvalidArgumentError(fmt::format("remote: unknown message type {}", *type));
    }
  }
  Answer(std::move(answer), std::move(reply));
}

void RemoteServer::Answer(absl::StatusOr<std::string> answer, Transport::Reply reply) {
  if (!answer.ok()) {
    absl::MutexLock lock(&mu_);
    ++stats_.refused;
  }
  std::move(reply)(std::move(answer));
}

absl::StatusOr<std::string> RemoteServer::Query(std::string_view request) {
  absl::StatusOr<QueryRequest> query = DecodeQuery(request);
  if (!query.ok()) return query.status();
  QueryReply reply;
  for (const ChunkKey& key : query->chain) {
    absl::StatusOr<std::optional<ChunkLease>> lease =
        host_.AcquireForCopy(key, kDescribeLease, Forms::kAny);
    if (lease.ok() && lease->has_value()) {
      // A chunk held compressed is described as it decodes: a Lease decodes it first.
      const ChunkLease& chunk = **lease;
      const StoredEncoding& form = chunk.encoding();
      if (!form.encoded() || options_.promote_below) {
        reply.held.push_back(
            {.payload_bytes = form.encoded() ? form.decoded_bytes : chunk.size_bytes(),
             .payload_checksum = form.encoded() ? form.decoded_checksum : chunk.checksum(),
             .num_tokens = chunk.num_tokens()});
        continue;
      }
    }
    std::optional<LowerTier::ChunkInfo> below;
    if (options_.describe_below) below = options_.describe_below(key);
    if (!below.has_value()) break;  // the run ends at the first chunk held nowhere here
    reply.held.push_back({.payload_bytes = below->payload_bytes,
                          .payload_checksum = below->payload_checksum,
                          .num_tokens = below->num_tokens});
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.queries;
  }
  return EncodeQueryReply(reply);
}

void RemoteServer::Lease(std::string_view request, Transport::Reply reply) {
  absl::StatusOr<LeaseRequest> lease_request = DecodeLease(request);
  if (!lease_request.ok()) return Answer(lease_request.status(), std::move(reply));
  if (lease_request->lease_ms == 0) {
    return Answer(absl::InvalidArgumentError("remote: a lease of 0 ms"), std::move(reply));
  }
  std::vector<ChunkKey> below;
  if (options_.describe_below && options_.promote_below) {
    for (const ChunkKey& key : lease_request->keys) {
      const bool below_host = !host_.Contains(key) && options_.describe_below(key).has_value();
      if (below_host || host_.HoldsEncoded(key)) below.push_back(key);
    }
  }
  if (below.empty()) return AnswerLease(*lease_request, std::move(reply));
  // The promotion's callback owns the request and the reply; when the store refuses (stopping),
  // they come back here through `slot`.
  auto slot = std::make_shared<std::optional<std::pair<LeaseRequest, Transport::Reply>>>(
      std::make_pair(*std::move(lease_request), std::move(reply)));
  const bool accepted = options_.promote_below(std::move(below), [this, slot]() mutable {
    auto [leasing, answer_to] = std::move(**slot);
    slot->reset();
    {
      absl::MutexLock lock(&mu_);
      ++stats_.leases_promoted;
    }
    AnswerLease(leasing, std::move(answer_to));
  });
  if (!accepted && slot->has_value()) {
    auto [leasing, answer_to] = std::move(**slot);
    slot->reset();
    AnswerLease(leasing, std::move(answer_to));
  }
}

void RemoteServer::AnswerLease(const LeaseRequest& request, Transport::Reply reply) {
  absl::StatusOr<LeaseReply> leased = LeaseHeld(request);
  if (!leased.ok()) return Answer(leased.status(), std::move(reply));
  // The peer reads these pages next, through the transport's thread: they are faulted into this
  // process first, off that thread (the engine that wrote them mapped them, this process may not
  // have yet).
  landing_.Run([this, leased = *std::move(leased), reply = std::move(reply)]() mutable {
    for (const LeasedChunk& chunk : leased.chunks) PrefaultServed(chunk.ranges);
    Answer(EncodeLeaseReply(leased), std::move(reply));
  });
}

void RemoteServer::PrefaultServed(std::span<const RemoteRange> ranges) const {
  for (const RemoteRange& range : ranges) {
    host_.arena_pages().ForRead(
        std::span<const std::byte>(host_.arena_base() + range.offset, range.length));
  }
}

void RemoteServer::PrefaultInBackground(std::vector<RemoteRange> ranges) {
  landing_.Run([this, ranges = std::move(ranges)] { PrefaultServed(ranges); });
}

absl::StatusOr<LeaseReply> RemoteServer::LeaseHeld(const LeaseRequest& lease_request) {
  // A longer lease than this node grants is cut short, not refused: a requester whose reads
  // outlast it finds the lease expired at its release and fails those chunks.
  const std::chrono::milliseconds duration =
      std::min(std::chrono::milliseconds(lease_request.lease_ms), options_.max_lease);
  LeaseSet set{.deadline = Clock::now() + duration};
  LeaseReply reply;
  for (const ChunkKey& key : lease_request.keys) {
    LeasedChunk leased;
    absl::StatusOr<std::optional<ChunkLease>> lease = host_.AcquireForCopy(key, duration);
    if (!lease.ok()) {
      leased.code = static_cast<int32_t>(lease.status().code());
    } else if (!lease->has_value()) {
      leased.code = static_cast<int32_t>(absl::StatusCode::kAborted);
    } else {
      const ChunkLease& chunk = **lease;
      leased.chunk = {.payload_bytes = chunk.size_bytes(),
                      .payload_checksum = chunk.checksum(),
                      .num_tokens = chunk.num_tokens()};
      for (const storage::ArenaRange& range : chunk.ranges()) {
        leased.ranges.push_back({.offset = range.offset, .length = range.size_bytes});
      }
      set.leases.push_back(std::move(**lease));
    }
    reply.chunks.push_back(std::move(leased));
  }
  absl::MutexLock lock(&mu_);
  SweepExpired();
  if (lease_sets_.size() >= options_.max_lease_sets) {
    return absl::ResourceExhaustedError(
        fmt::format("remote: {} lease sets held already", lease_sets_.size()));
  }
  reply.lease_id = next_lease_id_++;
  stats_.chunks_leased += set.leases.size();
  lease_sets_.emplace(reply.lease_id, std::move(set));
  return reply;
}

absl::StatusOr<std::string> RemoteServer::Release(std::string_view request) {
  absl::StatusOr<ReleaseRequest> release = DecodeRelease(request);
  if (!release.ok()) return release.status();
  LeaseSet released;
  {
    absl::MutexLock lock(&mu_);
    SweepExpired();
    auto it = lease_sets_.find(release->lease_id);
    if (it != lease_sets_.end()) {
      released = std::move(it->second);
      lease_sets_.erase(it);
    }
  }
  return std::string();  // the leases go as `released` does, outside the lock
}

// A Push being read: one reservation per chunk read, answered when the last read is done.
struct RemoteServer::PushRound {
  absl::Mutex mu;
  std::vector<int32_t> codes;
  std::vector<std::optional<WriteReservation>> reservations;
  std::vector<uint64_t> checksums;
  size_t reading = 0;
  Transport::Reply reply;
};

namespace {

int32_t CodeOf(const absl::Status& status) { return static_cast<int32_t>(status.code()); }

}  // namespace

void RemoteServer::Push(PeerId peer, std::string_view request, Transport::Reply reply) {
  absl::StatusOr<PushRequest> push = DecodePush(request);
  if (!push.ok() || landing_.transport() == nullptr) {
    {
      absl::MutexLock lock(&mu_);
      ++stats_.refused;
    }
    std::move(reply)(push.ok() ? absl::UnavailableError("remote: not serving pushes yet")
                               : push.status());
    return;
  }
  const size_t count = push->chunks.size();
  auto round = std::make_shared<PushRound>();
  round->codes.assign(count, 0);
  round->reservations.resize(count);
  round->checksums.resize(count);
  round->reply = std::move(reply);
  std::vector<std::vector<Segment>> reads(count);
  for (size_t i = 0; i < count; ++i) {
    const PushedChunk& pushed = push->chunks[i];
    absl::StatusOr<internal::PushedPages> reserved =
        internal::ReservePushed(host_, push->layout, pushed.key, pushed.chunk);
    if (!reserved.ok()) {
      round->codes[i] = CodeOf(reserved.status());
      continue;
    }
    absl::StatusOr<std::vector<Segment>> segments =
        internal::PairPieces(pushed.ranges, reserved->parts);
    if (!segments.ok()) {
      host_.Abort(std::move(reserved->reservation));
      round->codes[i] = CodeOf(segments.status());
      continue;
    }
    reads[i] = *std::move(segments);
    round->reservations[i] = std::move(reserved->reservation);
    round->checksums[i] = pushed.chunk.payload_checksum;
    ++round->reading;
  }
  if (round->reading == 0) {
    std::move(round->reply)(EncodePushReply({.codes = round->codes}));
    return;
  }
  const Deadline deadline = Clock::now() + options_.push_timeout;
  for (size_t i = 0; i < count; ++i) {
    if (!round->reservations[i].has_value()) continue;
    landing_.Read(peer, std::move(reads[i]), deadline, [this, round, i](absl::Status read) {
      // The check reads the whole chunk: not on the transport's thread.
      landing_.Run([this, round, i, read = std::move(read)] { Land(*round, i, read); });
    });
  }
}

void RemoteServer::Land(PushRound& round, size_t i, absl::Status read) {
  WriteReservation reservation = *std::move(round.reservations[i]);
  absl::Status stored = read;
  if (stored.ok() &&
      ChecksumRanges(host_.arena_base(), reservation.ranges()) != round.checksums[i]) {
    stored = absl::DataLossError("remote: a pushed chunk failed its checksum");
  }
  if (stored.ok()) {
    stored = host_.Commit(std::move(reservation), round.checksums[i]);
  } else {
    host_.Abort(std::move(reservation));
  }
  Transport::Reply reply;
  std::vector<int32_t> codes;
  {
    absl::MutexLock lock(&round.mu);
    round.codes[i] = CodeOf(stored);
    if (--round.reading > 0) return;
    reply = std::move(round.reply);
    codes = round.codes;
  }
  uint64_t received = 0;
  for (int32_t code : codes) received += code == 0 ? 1 : 0;
  {
    absl::MutexLock lock(&mu_);
    stats_.chunks_received += received;
  }
  std::move(reply)(EncodePushReply({.codes = std::move(codes)}));
}

void RemoteServer::SweepExpired() {
  const Clock::time_point now = Clock::now();
  absl::erase_if(lease_sets_, [&](const auto& entry) { return entry.second.deadline <= now; });
}

RemoteServerStats RemoteServer::Stats() const {
  absl::MutexLock lock(&mu_);
  RemoteServerStats stats = stats_;
  stats.lease_sets_held = lease_sets_.size();
  return stats;
}

}  // namespace strata::storage::remote
