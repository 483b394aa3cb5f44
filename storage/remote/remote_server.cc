#include "storage/remote/remote_server.h"

#include <utility>

#include "fmt/format.h"
#include "storage/remote/remote_messages.h"

namespace strata::storage::remote {
namespace {

using Clock = std::chrono::steady_clock;

// How long a Query holds each chunk to read its description.
constexpr auto kDescribeLease = std::chrono::seconds(1);

}  // namespace

RemoteServer::RemoteServer(HostTier& host, RemoteServerOptions options)
    : host_(host), options_(options) {}

void RemoteServer::Handle(PeerId /*peer*/, std::string request, Transport::Reply reply) {
  absl::StatusOr<uint8_t> type = MessageType(request);
  absl::StatusOr<std::string> answer = absl::InternalError("remote: unanswered");
  if (!type.ok()) {
    answer = type.status();
  } else {
    switch (static_cast<RemoteMessage>(*type)) {
      case RemoteMessage::kQuery:
        answer = Query(request);
        break;
      case RemoteMessage::kLease:
        answer = Lease(request);
        break;
      case RemoteMessage::kRelease:
        answer = Release(request);
        break;
      default:
        answer = absl::InvalidArgumentError(fmt::format("remote: unknown message type {}", *type));
    }
  }
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
  const size_t held = host_.Lookup(query->chain);
  for (size_t i = 0; i < held; ++i) {
    absl::StatusOr<std::optional<ChunkLease>> lease =
        host_.AcquireForCopy(query->chain[i], kDescribeLease);
    if (!lease.ok() || !lease->has_value()) break;  // gone since Lookup: the run ends here
    const ChunkLease& chunk = **lease;
    reply.held.push_back({.payload_bytes = chunk.size_bytes(),
                          .payload_checksum = chunk.checksum(),
                          .num_tokens = chunk.num_tokens()});
  }
  {
    absl::MutexLock lock(&mu_);
    ++stats_.queries;
  }
  return EncodeQueryReply(reply);
}

absl::StatusOr<std::string> RemoteServer::Lease(std::string_view request) {
  absl::StatusOr<LeaseRequest> lease_request = DecodeLease(request);
  if (!lease_request.ok()) return lease_request.status();
  if (lease_request->lease_ms == 0 || lease_request->lease_ms > options_.max_lease.count()) {
    return absl::InvalidArgumentError(fmt::format("remote: a lease of {} ms (1..{} allowed)",
                                                  lease_request->lease_ms,
                                                  options_.max_lease.count()));
  }
  const std::chrono::milliseconds duration(lease_request->lease_ms);
  LeaseSet set{.deadline = Clock::now() + duration};
  LeaseReply reply;
  for (const ChunkKey& key : lease_request->keys) {
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
  return EncodeLeaseReply(reply);
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
