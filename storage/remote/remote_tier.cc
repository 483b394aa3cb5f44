#include "storage/remote/remote_tier.h"

#include <algorithm>
#include <utility>

#include "absl/synchronization/notification.h"
#include "core/page_prefault.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"
#include "storage/host/payload_view.h"
#include "storage/remote/internal/piece_pairing.h"
#include "storage/remote/internal/wire_status.h"

namespace strata::storage::remote {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

// One Query's answers, gathered until every asked peer answered or its call ran out.
class RemoteTier::QueryRound {
 public:
  QueryRound(size_t peers, QueryDone done) : waiting_(peers), done_(std::move(done)) {}

  void Answered(size_t held) {
    QueryDone done;
    size_t best = 0;
    {
      absl::MutexLock lock(&mu_);
      best_ = std::max(best_, held);
      if (--waiting_ > 0) return;
      done = std::move(done_);
      best = best_;
    }
    std::move(done)(best);
  }

 private:
  absl::Mutex mu_;
  size_t waiting_ ABSL_GUARDED_BY(mu_);
  size_t best_ ABSL_GUARDED_BY(mu_) = 0;
  QueryDone done_ ABSL_GUARDED_BY(mu_);
};

RemoteTier::RemoteTier(RemoteTierOptions options) : options_(options) {
  stats_.tier = Tier::kRemote;
}

RemoteTier::~RemoteTier() = default;

void RemoteTier::Attach(Transport* transport, PeerSet* peers, const PrefaultedRegion& arena) {
  transport_ = transport;
  peers_ = peers;
  arena_ = &arena;
  attached_.store(true, std::memory_order_release);
}

void RemoteTier::Query(std::vector<ChunkKey> chain, QueryDone done,
                       std::chrono::microseconds budget) {
  if (!attached_.load(std::memory_order_acquire) || chain.empty()) {
    std::move(done)(0);
    return;
  }
  const std::vector<PeerId> serving = peers_->PeersServing(chain.front().layout_fingerprint());
  if (serving.empty()) {
    std::move(done)(0);
    return;
  }
  // A peer answers at most kMaxChainChunks keys: longer chains are asked about their start.
  if (chain.size() > kMaxChainChunks) chain.resize(kMaxChainChunks);
  auto round = std::make_shared<QueryRound>(serving.size(), std::move(done));
  auto shared_chain = std::make_shared<const std::vector<ChunkKey>>(std::move(chain));
  const std::string request = EncodeQuery({.chain = *shared_chain});
  const Deadline deadline = Clock::now() + (budget.count() > 0 ? budget : options_.lookup_budget);
  for (PeerId peer : serving) {
    transport_->Call(peer, request, deadline,
                     [this, round, peer, shared_chain](absl::StatusOr<std::string> reply) {
                       size_t held = 0;
                       if (reply.ok()) {
                         absl::StatusOr<QueryReply> answer = DecodeQueryReply(*reply);
                         if (answer.ok() && answer->held.size() <= shared_chain->size()) {
                           held = answer->held.size();
                           Remember(peer, *shared_chain, answer->held);
                         }
                       }
                       round->Answered(held);
                     });
  }
}

void RemoteTier::Discover(std::vector<ChunkKey> chain, std::chrono::microseconds budget,
                          DiscoverDone done) {
  Query(
      std::move(chain), [done = std::move(done)](size_t) mutable { std::move(done)(); }, budget);
}

void RemoteTier::Remember(PeerId peer, std::span<const ChunkKey> chain,
                          std::span<const RemoteChunk> held) {
  const Clock::time_point until = Clock::now() + options_.remembered_for;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < held.size(); ++i) {
    Forget(chain[i]);
    oldest_.push_back(chain[i]);
    remembered_[chain[i]] =
        Remembered{.peer = peer, .chunk = held[i], .until = until, .age = std::prev(oldest_.end())};
    remembered_bytes_ += held[i].payload_bytes;
  }
  while (remembered_.size() > options_.remembered_chunks) Forget(oldest_.front());
}

void RemoteTier::Forget(const ChunkKey& key) {
  auto it = remembered_.find(key);
  if (it == remembered_.end()) return;
  oldest_.erase(it->second.age);
  remembered_bytes_ -= it->second.chunk.payload_bytes;
  remembered_.erase(it);
}

std::optional<LowerTier::ChunkInfo> RemoteTier::Lookup(const ChunkKey& key) const {
  absl::MutexLock lock(&mu_);
  auto it = remembered_.find(key);
  if (it == remembered_.end() || it->second.until <= Clock::now()) return std::nullopt;
  return ChunkInfo{.payload_bytes = it->second.chunk.payload_bytes,
                   .payload_checksum = it->second.chunk.payload_checksum,
                   .num_tokens = it->second.chunk.num_tokens};
}

absl::StatusOr<LowerTier::ListPage> RemoteTier::List(const ListOptions&) const {
  return absl::FailedPreconditionError(
      "remote tier: its chunks are its peers'; list them on each peer (ListChunks there)");
}

std::vector<absl::Status> RemoteTier::PutBatch(std::span<const Put> puts) {
  return std::vector<absl::Status>(
      puts.size(), absl::FailedPreconditionError("remote tier: chunks are not demoted to peers"));
}

std::vector<absl::Status> RemoteTier::ReadBatch(std::span<const ChunkKey> keys,
                                                std::span<const MutableParts> destinations) {
  std::vector<absl::Status> results(keys.size());
  absl::flat_hash_map<PeerId, std::vector<size_t>> by_peer;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = remembered_.find(keys[i]);
      if (!attached_.load(std::memory_order_acquire) || it == remembered_.end()) {
        results[i] = absl::AbortedError("remote tier: no peer is known to hold the chunk");
      } else {
        by_peer[it->second.peer].push_back(i);
      }
    }
  }
  for (const auto& [peer, indices] : by_peer) {
    std::vector<absl::Status> fetched = FetchFrom(peer, keys, destinations, indices);
    for (size_t j = 0; j < indices.size(); ++j) results[indices[j]] = std::move(fetched[j]);
  }
  return results;
}

std::vector<absl::Status> RemoteTier::FetchFrom(PeerId peer, std::span<const ChunkKey> keys,
                                                std::span<const MutableParts> destinations,
                                                std::span<const size_t> indices) {
  std::vector<absl::Status> results(indices.size());
  const Clock::time_point started = Clock::now();
  const Deadline deadline = started + options_.fetch_timeout;
  LeaseRequest request{.lease_ms = static_cast<uint32_t>(options_.fetch_timeout.count())};
  for (size_t index : indices) request.keys.push_back(keys[index]);

  absl::Notification leased;
  absl::StatusOr<std::string> lease_answer;
  transport_->Call(peer, EncodeLease(request), deadline, [&](absl::StatusOr<std::string> answer) {
    lease_answer = std::move(answer);
    leased.Notify();
  });
  leased.WaitForNotification();  // the transport completes every call by its deadline
  absl::StatusOr<LeaseReply> reply = lease_answer.ok()
                                         ? DecodeLeaseReply(*lease_answer)
                                         : absl::StatusOr<LeaseReply>(lease_answer.status());
  if (reply.ok() && reply->chunks.size() != indices.size()) {
    reply = absl::DataLossError("remote: the peer answered a lease for another number of chunks");
  }
  if (!reply.ok()) {
    const absl::Status failed = Annotate(reply.status(), "remote tier: lease");
    std::fill(results.begin(), results.end(), failed);
    if (options_.on_fetch) options_.on_fetch(Clock::now() - started, false);
    absl::MutexLock lock(&mu_);
    stats_.io_errors += indices.size();
    return results;
  }

  // One Read per chunk, all in flight together; each chunk fails alone. Each chunk's checksum is
  // checked on this thread as soon as its read has landed, while the later reads still run.
  struct Arrivals {
    absl::Mutex mu;
    std::vector<size_t> landed ABSL_GUARDED_BY(mu);  // chunks whose reads completed, in order
  } arrivals;
  size_t reading = 0;
  for (size_t j = 0; j < indices.size(); ++j) {
    const LeasedChunk& chunk = reply->chunks[j];
    const std::optional<ChunkInfo> expected = Lookup(keys[indices[j]]);
    absl::StatusOr<std::vector<Segment>> segments =
        chunk.code != 0 ? absl::StatusOr<std::vector<Segment>>(
                              internal::StatusFromWire(chunk.code, "remote tier: the peer's lease"))
                        : internal::PairPieces(chunk.ranges, destinations[indices[j]]);
    if (segments.ok() &&
        (!expected || expected->payload_checksum != chunk.chunk.payload_checksum)) {
      segments = absl::AbortedError("remote tier: the peer holds another version of the chunk");
    }
    if (!segments.ok()) {
      results[j] = segments.status();
      continue;
    }
    ++reading;
    // Faulted in here, not by the transport's thread as the bytes land: it keeps answering.
    for (std::span<std::byte> part : destinations[indices[j]]) arena_->ForWrite(part);
    transport_->Read(peer, *segments, deadline, [&results, &arrivals, j](absl::Status status) {
      absl::MutexLock lock(&arrivals.mu);
      results[j] = std::move(status);
      arrivals.landed.push_back(j);
    });
  }
  std::byte* base = arena_->mapping().data();
  uint64_t read_bytes = 0;
  uint64_t corrupt = 0;
  // Every Read completes by its deadline; once it has, the transport no longer touches its pages.
  for (size_t checked = 0; checked < reading; ++checked) {
    size_t j = 0;
    {
      absl::MutexLock lock(&arrivals.mu);
      arrivals.mu.Await(absl::Condition(
          +[](std::vector<size_t>* landed) { return !landed->empty(); }, &arrivals.landed));
      j = arrivals.landed.back();
      arrivals.landed.pop_back();
    }
    if (!results[j].ok()) continue;
    std::vector<ArenaRange> ranges;
    for (std::span<std::byte> part : destinations[indices[j]]) {
      ranges.push_back(
          {.offset = static_cast<uint64_t>(part.data() - base), .size_bytes = part.size()});
    }
    if (ChecksumRanges(base, ranges) != reply->chunks[j].chunk.payload_checksum) {
      results[j] =
          absl::DataLossError(fmt::format("remote tier: chunk {} from peer {} failed its checksum",
                                          keys[indices[j]].ToString(), peer));
      ++corrupt;
    } else {
      read_bytes += reply->chunks[j].chunk.payload_bytes;
    }
  }
  transport_->Call(peer, EncodeRelease({.lease_id = reply->lease_id}), deadline,
                   [](absl::StatusOr<std::string>) {});
  uint64_t failed = 0;
  for (const absl::Status& result : results) failed += result.ok() ? 0 : 1;
  if (options_.on_fetch) options_.on_fetch(Clock::now() - started, failed == 0);
  absl::MutexLock lock(&mu_);
  stats_.reads += indices.size() - failed;
  stats_.read_bytes += read_bytes;
  stats_.checksum_failures += corrupt;
  stats_.io_errors += failed - corrupt;
  for (size_t j = 0; j < indices.size(); ++j) {
    if (!results[j].ok()) Forget(keys[indices[j]]);
  }
  return results;
}

absl::StatusOr<bool> RemoteTier::Remove(const ChunkKey& key) {
  absl::MutexLock lock(&mu_);
  Forget(key);
  return false;  // peers keep their chunks: this tier held none of them
}

void RemoteTier::ForgetPeer(PeerId peer) {
  absl::MutexLock lock(&mu_);
  std::vector<ChunkKey> held;
  for (const auto& [key, remembered] : remembered_) {
    if (remembered.peer == peer) held.push_back(key);
  }
  for (const ChunkKey& key : held) Forget(key);
}

absl::StatusOr<RemoveResult> RemoteTier::RemoveIf(
    absl::FunctionRef<bool(const ChunkKey&)> predicate) {
  absl::MutexLock lock(&mu_);
  std::vector<ChunkKey> matching;
  for (const auto& [key, remembered] : remembered_) {
    if (predicate(key)) matching.push_back(key);
  }
  for (const ChunkKey& key : matching) Forget(key);
  return RemoveResult{};
}

absl::Status RemoteTier::RegisterMemory(std::span<const std::span<std::byte>> /*regions*/) {
  // The transport registered the arena when it was created over it.
  return absl::OkStatus();
}

LowerTierStats RemoteTier::Stats() const {
  absl::MutexLock lock(&mu_);
  LowerTierStats stats = stats_;
  stats.chunks = remembered_.size();
  stats.payload_bytes = remembered_bytes_;
  stats.stored_bytes = remembered_bytes_;
  return stats;
}

}  // namespace strata::storage::remote
