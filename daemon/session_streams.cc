#include "daemon/session_streams.h"

#include <memory>
#include <utility>

#include "core/fmt_absl.h"
#include "spdlog/spdlog.h"

namespace strata::daemon {
namespace {

// How long the copy leases of a committed stream may wait for the peer's answer: the sender's
// own deadline ends the wait before.
constexpr auto kCommitLease = std::chrono::minutes(10);

}  // namespace

SessionStreams::SessionStreams(storage::remote::RemoteNode& node, storage::HostTier& host)
    : node_(node), host_(host) {}

SessionStreams::~SessionStreams() {
  for (const auto& [stream, out] : streams_) node_.AbortStream(stream);
}

void SessionStreams::Add(std::string_view target, uint64_t handle,
                         const storage::WriteReservation& reservation, uint32_t num_tokens) {
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const Pending& p) { return p.target == target; });
  if (it == pending_.end())
    it = pending_.insert(pending_.end(), Pending{.target = std::string(target)});
  storage::remote::PushedChunk chunk{
      .key = reservation.key(),
      .chunk = {.payload_bytes = reservation.size_bytes(), .num_tokens = num_tokens}};
  for (const storage::ArenaRange& range : reservation.ranges()) {
    chunk.ranges.push_back({.offset = range.offset, .length = range.size_bytes});
  }
  it->handles.push_back(handle);
  it->chunks.push_back(std::move(chunk));
}

std::vector<uint64_t> SessionStreams::Open(const KvLayout& layout, std::chrono::milliseconds hold) {
  std::vector<uint64_t> streamed;
  for (Pending& pending : pending_) {
    Out out;
    for (const storage::remote::PushedChunk& chunk : pending.chunks) out.keys.push_back(chunk.key);
    absl::StatusOr<uint64_t> stream =
        node_.OpenStream(pending.target, layout, std::move(pending.chunks), hold);
    if (!stream.ok()) {
      spdlog::warn("layer stream to {}: {}; the decoder fetches those chunks instead",
                   pending.target, stream.status());
      continue;
    }
    out.stream = *stream;
    out.unsettled = pending.handles.size();
    out.checksums.assign(pending.handles.size(), 0);
    for (size_t i = 0; i < pending.handles.size(); ++i) {
      by_handle_[pending.handles[i]] = {*stream, i};
      streamed.push_back(pending.handles[i]);
    }
    streams_.emplace(*stream, std::move(out));
  }
  pending_.clear();
  return streamed;
}

void SessionStreams::LayersSaved(std::span<const uint64_t> handles, uint32_t layers) {
  uint64_t last = 0;  // handles of one stream come together: announce each stream once
  for (uint64_t handle : handles) {
    auto it = by_handle_.find(handle);
    if (it == by_handle_.end() || it->second.first == last) continue;
    last = it->second.first;
    node_.StreamLayersReady(last, layers);
  }
}

void SessionStreams::Settled(uint64_t handle, const absl::Status& committed, uint64_t checksum) {
  auto found = by_handle_.find(handle);
  if (found == by_handle_.end()) return;
  // Not a structured binding: the lambda below captures the id (clang before 16 refuses that).
  const uint64_t stream = found->second.first;
  const size_t index = found->second.second;
  by_handle_.erase(found);
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  Out& out = it->second;
  out.checksums[index] = checksum;
  out.failed = out.failed || !committed.ok();
  if (--out.unsettled > 0) return;
  Out done = std::move(out);
  streams_.erase(it);
  if (done.failed) {
    node_.AbortStream(stream);
    return;
  }
  // The committed chunks' pages stay as they are while the peer reads them.
  auto leases = std::make_shared<std::vector<storage::ChunkLease>>();
  for (const ChunkKey& key : done.keys) {
    absl::StatusOr<std::optional<storage::ChunkLease>> lease =
        host_.AcquireForCopy(key, kCommitLease);
    if (lease.ok() && lease->has_value()) leases->push_back(std::move(**lease));
  }
  node_.CommitStream(stream, std::move(done.checksums),
                     [host = &host_, keys = std::move(done.keys), leases,
                      stream](absl::StatusOr<std::vector<absl::Status>> chunks) {
                       if (!chunks.ok()) {
                         spdlog::warn("layer stream {}: {}; the decoder fetches its chunks instead",
                                      stream, chunks.status());
                         return;
                       }
                       for (size_t i = 0; i < keys.size() && i < chunks->size(); ++i) {
                         const absl::Status& arrived = (*chunks)[i];
                         if (arrived.ok() || arrived.code() == absl::StatusCode::kAlreadyExists) {
                           (void)host->Unpin(keys[i],
                                             storage::PinKind::kSoft);  // the decoder has it
                         }
                       }
                     });
}

}  // namespace strata::daemon
