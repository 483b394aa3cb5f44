// DaemonFeed: keeps one daemon's share of the cluster index (cluster_index.h) up to date from
// the daemon's control API. It registers the instance, then on its own
// thread:
//   1. opens WatchEvents from the next event (from_sequence 0), which says where the stream
//      stands;
//   2. takes a snapshot: the host and disk tiers' chunks, listed page by page (columnar
//      ListChunks; a daemon without a disk tier lists the host tier alone), go into the index
//      in one Ingest, behind a kCleared that drops what the index held for the
//      instance (so a lookup sees the old view or the new one, never a mix);
//   3. applies the stream's events, one Ingest per response, checking that their sequence
//      numbers follow on without a gap.
// The events from step 1 on are applied after the snapshot: a chunk stored or removed while
// the pages were read ends as the daemon has it (storing and removing are idempotent in the
// index). When the stream breaks it resumes from the next sequence number; a new epoch (the
// daemon restarted), OUT_OF_RANGE (its event ring overflowed) or a gap in the sequence numbers
// takes a fresh snapshot instead, for this instance alone. So does a Cleared event, once
// applied: the daemon cleared one tier, the index clears the instance (ChunkEventKind::kCleared),
// and the snapshot brings back the tiers that kept their chunks. A daemon unreachable for
// `unreachable_timeout` has its chunks cleared from the index until it answers again.
//
// What the feed applies it also publishes to `events` (when given), one batch per applied
// response (EVENTS), snapshot (RESYNCED), unreachable clear (CLEARED) and, from the destructor,
// the instance's departure (LEFT).
//
// Threading: Start spawns the feed's thread; stats() may be called from any thread; the
// destructor cancels the stream, joins the thread and drops the instance from the index. The
// index must outlive the feed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "controller/index/cluster_index.h"
#include "controller/ingest/event_hub.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "strata/v1/control.grpc.pb.h"

namespace strata::controller {

struct DaemonFeedOptions {
  std::string instance_id;
  // The daemon's control API (its TLS, if any, set on the channel).
  std::shared_ptr<grpc::Channel> channel;
  // Sent as "authorization: Bearer <token>" when not empty (a daemon that requires it over TCP).
  std::string bearer_token;
  ClusterIndex* index = nullptr;  // not owned
  // Where what is applied is published; null: nowhere. Not owned; outlives the feed.
  EventHub* events = nullptr;
  // Chunks per ListChunks page of a snapshot (the daemon's limit is 10000).
  uint32_t page_size = 10'000;
  // Between attempts to reach the daemon again.
  std::chrono::milliseconds retry_delay{200};
  // A daemon unreachable this long has its chunks cleared from the index.
  std::chrono::milliseconds unreachable_timeout{5'000};
  // Each call (a ListChunks page, opening the stream) gives up after this long.
  std::chrono::milliseconds call_timeout{5'000};
};

struct DaemonFeedStats {
  bool following = false;  // a snapshot is in the index and the stream is open
  uint64_t epoch = 0;      // the daemon run followed (WatchEventsResponse.epoch)
  uint64_t next_sequence = 0;
  uint64_t snapshots = 0;
  uint64_t snapshot_chunks = 0;  // chunks in the last snapshot
  uint64_t events_applied = 0;
  uint64_t malformed_events = 0;  // skipped (counted, never applied)
  uint64_t resumes = 0;           // streams reopened without a snapshot
  uint64_t unreachable_clears = 0;
};

class DaemonFeed {
 public:
  // kInvalidArgument for a missing index or channel; RegisterInstance's errors (an id already
  // registered is kFailedPrecondition).
  static absl::StatusOr<std::unique_ptr<DaemonFeed>> Start(DaemonFeedOptions options);
  ~DaemonFeed();

  DaemonFeed(const DaemonFeed&) = delete;
  DaemonFeed& operator=(const DaemonFeed&) = delete;

  DaemonFeedStats stats() const;

 private:
  explicit DaemonFeed(DaemonFeedOptions options);

  // What a stream ended with: resume it from next_sequence, or take a snapshot first.
  enum class Next { kResume, kSnapshot };

  void Run();
  // One stream: opened from next_sequence (kResume) or from the next event with a snapshot
  // (kSnapshot), then followed until it breaks. Returns how to go on, and whether the daemon
  // answered at all.
  Next Follow(Next how, bool& reached);
  // Reads the host and disk tiers' chunks into the index (behind a kCleared).
  absl::Status TakeSnapshot();
  // Appends the chunks of `tier` (columnar ListChunks pages) to `batch`; OK with none for a
  // tier below the host tier that the daemon lacks.
  absl::Status ListTier(v1::Tier tier, std::vector<ChunkEvent>& batch);
  // Applies the events of one response; false (nothing applied) when they do not follow on
  // from next_sequence or come from another epoch, and false after applying them when one was
  // a Cleared (a snapshot is due).
  bool Apply(const v1::WatchEventsResponse& response);
  // Clears the instance's chunks from the index, once per spell of unreachability.
  void ClearWhileUnreachable();
  // Publishes a batch of `kind` (with `events` for EVENTS) when there is a hub.
  void Publish(v1::InstanceEvents::Kind kind,
               const google::protobuf::RepeatedPtrField<v1::ChunkEvent>* events = nullptr);
  void PrepareContext(grpc::ClientContext& context, bool with_deadline) const;
  // Waits retry_delay, or less when stopping; false when stopping.
  bool WaitToRetry();

  const DaemonFeedOptions options_;
  std::unique_ptr<v1::StrataControl::Stub> stub_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The calls in flight, cancelled by the destructor.
  grpc::ClientContext* stream_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  grpc::ClientContext* call_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  DaemonFeedStats stats_ ABSL_GUARDED_BY(mu_);
  bool cleared_while_unreachable_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;
};

}  // namespace strata::controller
