#include "controller/ingest/daemon_feed.h"

#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/time/time.h"
#include "control/bearer_auth.h"
#include "controller/ingest/daemon_events.h"
#include "proto/convert.h"
#include "spdlog/spdlog.h"

namespace strata::controller {

using Clock = std::chrono::steady_clock;

absl::StatusOr<std::unique_ptr<DaemonFeed>> DaemonFeed::Start(DaemonFeedOptions options) {
  if (options.index == nullptr || options.channel == nullptr) {
    return absl::InvalidArgumentError("a daemon feed needs an index and a channel");
  }
  if (absl::Status s = options.index->RegisterInstance(options.instance_id); !s.ok()) return s;
  std::unique_ptr<DaemonFeed> feed(new DaemonFeed(std::move(options)));
  feed->thread_ = std::thread([feed = feed.get()] { feed->Run(); });
  return feed;
}

DaemonFeed::DaemonFeed(DaemonFeedOptions options)
    : options_(std::move(options)), stub_(v1::StrataControl::NewStub(options_.channel)) {}

DaemonFeed::~DaemonFeed() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (stream_context_ != nullptr) stream_context_->TryCancel();
    if (call_context_ != nullptr) call_context_->TryCancel();
  }
  thread_.join();
  (void)options_.index->DropInstance(options_.instance_id);
  Publish(v1::InstanceEvents::LEFT);
}

void DaemonFeed::Publish(v1::InstanceEvents::Kind kind,
                         const google::protobuf::RepeatedPtrField<v1::ChunkEvent>* events) {
  if (options_.events == nullptr) return;
  v1::InstanceEvents batch;
  batch.set_instance_id(options_.instance_id);
  batch.set_kind(kind);
  if (events != nullptr) *batch.mutable_events() = *events;
  options_.events->Publish(batch);
}

DaemonFeedStats DaemonFeed::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void DaemonFeed::Run() {
  Next how = Next::kSnapshot;
  Clock::time_point last_reached = Clock::now();
  do {
    bool reached = false;
    how = Follow(how, reached);
    const Clock::time_point now = Clock::now();
    if (reached) {
      last_reached = now;
    } else if (now - last_reached >= options_.unreachable_timeout) {
      ClearWhileUnreachable();
      how = Next::kSnapshot;
    }
  } while (WaitToRetry());
}

DaemonFeed::Next DaemonFeed::Follow(Next how, bool& reached) {
  grpc::ClientContext context;
  PrepareContext(context, /*with_deadline=*/false);
  v1::WatchEventsRequest request;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return how;
    stream_context_ = &context;
    if (how == Next::kResume) request.set_from_sequence(stats_.next_sequence);
  }
  absl::Cleanup forget = [&] {
    absl::MutexLock lock(&mu_);
    stream_context_ = nullptr;
    stats_.following = false;
  };
  std::unique_ptr<grpc::ClientReader<v1::WatchEventsResponse>> reader =
      stub_->WatchEvents(&context, request);
  // Ends the stream early (the daemon goes on with its other clients).
  auto abandon = [&] {
    context.TryCancel();
    (void)reader->Finish();
    return Next::kSnapshot;
  };
  v1::WatchEventsResponse response;
  if (!reader->Read(&response)) {
    const grpc::Status status = reader->Finish();
    // OUT_OF_RANGE: the daemon answered that the events since next_sequence are gone.
    reached = status.error_code() == grpc::StatusCode::OUT_OF_RANGE;
    return reached ? Next::kSnapshot : how;
  }
  reached = true;
  if (how == Next::kResume) {
    bool same_run = false;
    {
      absl::MutexLock lock(&mu_);
      same_run = response.epoch() == stats_.epoch;
      stats_.resumes += same_run ? 1 : 0;
    }
    if (!same_run) return abandon();  // the daemon restarted
  } else {
    {
      absl::MutexLock lock(&mu_);
      stats_.epoch = response.epoch();
      stats_.next_sequence =
          response.events_size() > 0 ? response.events(0).sequence() : response.next_sequence();
    }
    if (absl::Status s = TakeSnapshot(); !s.ok()) {
      spdlog::warn("controller: snapshot of instance '{}' failed: {}", options_.instance_id,
                   s.ToString());
      return abandon();
    }
  }
  if (!Apply(response)) return abandon();
  {
    absl::MutexLock lock(&mu_);
    stats_.following = true;
  }
  while (reader->Read(&response)) {
    if (!Apply(response)) return abandon();
  }
  const grpc::Status status = reader->Finish();
  return status.error_code() == grpc::StatusCode::OUT_OF_RANGE ? Next::kSnapshot : Next::kResume;
}

absl::Status DaemonFeed::TakeSnapshot() {
  // The kCleared first: one Ingest replaces what the index held for the instance.
  std::vector<ChunkEvent> batch = {{.kind = ChunkEventKind::kCleared}};
  for (const v1::Tier tier : {v1::TIER_HOST, v1::TIER_DISK}) {
    if (absl::Status s = ListTier(tier, batch); !s.ok()) return s;
  }
  if (absl::Status s = options_.index->Ingest(options_.instance_id, batch); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    ++stats_.snapshots;
    stats_.snapshot_chunks = batch.size() - 1;
    cleared_while_unreachable_ = false;
  }
  Publish(v1::InstanceEvents::RESYNCED);
  return absl::OkStatus();
}

absl::Status DaemonFeed::ListTier(v1::Tier tier, std::vector<ChunkEvent>& batch) {
  v1::ListChunksRequest request;
  request.set_page_size(options_.page_size);
  request.set_tier(tier);
  request.set_columnar(true);
  do {
    grpc::ClientContext context;
    PrepareContext(context, /*with_deadline=*/true);
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("the feed is stopping");
      call_context_ = &context;
    }
    v1::ListChunksResponse page;
    const grpc::Status status = stub_->ListChunks(&context, request, &page);
    {
      absl::MutexLock lock(&mu_);
      call_context_ = nullptr;
    }
    // A daemon without the tier: nothing to list (UNIMPLEMENTED: one from before disk listings).
    if (tier != v1::TIER_HOST && (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                                  status.error_code() == grpc::StatusCode::UNIMPLEMENTED)) {
      return absl::OkStatus();
    }
    if (!status.ok()) return FromGrpcStatus(status);
    if (absl::Status s = AppendListedChunks(page.columns(), batch); !s.ok()) return s;
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return absl::OkStatus();
}

bool DaemonFeed::Apply(const v1::WatchEventsResponse& response) {
  uint64_t next = 0;
  {
    absl::MutexLock lock(&mu_);
    if (response.epoch() != stats_.epoch) return false;
    next = stats_.next_sequence;
  }
  std::vector<ChunkEvent> batch;
  batch.reserve(static_cast<size_t>(response.events_size()));
  uint64_t malformed = 0;
  bool cleared = false;
  for (const v1::ChunkEvent& event : response.events()) {
    if (event.sequence() != next) {
      spdlog::warn("controller: instance '{}' sent event {} where {} was due; taking a snapshot",
                   options_.instance_id, event.sequence(), next);
      return false;
    }
    ++next;
    absl::StatusOr<ChunkEvent> converted = FromProto(event);
    if (converted.ok()) {
      cleared |= converted->kind == ChunkEventKind::kCleared;
      batch.push_back(*converted);
    } else {
      ++malformed;
      spdlog::warn("controller: instance '{}': {}", options_.instance_id,
                   converted.status().ToString());
    }
  }
  if (response.next_sequence() != next) return false;
  if (absl::Status s = options_.index->Ingest(options_.instance_id, batch); !s.ok()) {
    spdlog::warn("controller: instance '{}': {}", options_.instance_id, s.ToString());
    return false;
  }
  {
    absl::MutexLock lock(&mu_);
    stats_.next_sequence = next;
    stats_.events_applied += batch.size();
    stats_.malformed_events += malformed;
  }
  if (response.events_size() > 0) Publish(v1::InstanceEvents::EVENTS, &response.events());
  if (cleared) {
    spdlog::info("controller: instance '{}' cleared a tier; taking a snapshot of the others",
                 options_.instance_id);
  }
  return !cleared;
}

void DaemonFeed::ClearWhileUnreachable() {
  {
    absl::MutexLock lock(&mu_);
    if (cleared_while_unreachable_) return;
    cleared_while_unreachable_ = true;
    ++stats_.unreachable_clears;
  }
  spdlog::warn("controller: instance '{}' unreachable for {} ms; its chunks leave the index",
               options_.instance_id, options_.unreachable_timeout.count());
  const ChunkEvent cleared{.kind = ChunkEventKind::kCleared};
  (void)options_.index->Ingest(options_.instance_id, {&cleared, 1});
  Publish(v1::InstanceEvents::CLEARED);
}

void DaemonFeed::PrepareContext(grpc::ClientContext& context, bool with_deadline) const {
  control::AttachBearerToken(context, options_.bearer_token);
  if (with_deadline) context.set_deadline(std::chrono::system_clock::now() + options_.call_timeout);
}

bool DaemonFeed::WaitToRetry() {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(options_.retry_delay));
  return !stopping_;
}

}  // namespace strata::controller
