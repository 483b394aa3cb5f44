#include "daemon/watch_events_reactor.h"

#include <optional>

#include "proto/convert.h"

namespace strata::daemon {
namespace {

v1::ChunkEvent::RemovalCause ToProto(storage::RemovalCause cause) {
  switch (cause) {
    case storage::RemovalCause::kEvicted:
      return v1::ChunkEvent::REMOVAL_CAUSE_EVICTED;
    case storage::RemovalCause::kRemoved:
      return v1::ChunkEvent::REMOVAL_CAUSE_REMOVED;
    case storage::RemovalCause::kCorrupt:
      return v1::ChunkEvent::REMOVAL_CAUSE_CORRUPT;
  }
  return v1::ChunkEvent::REMOVAL_CAUSE_UNSPECIFIED;
}

void ToProto(const KvEvent& event, v1::ChunkEvent& proto) {
  proto.set_sequence(event.sequence);
  proto.set_tier(v1::TIER_HOST);
  switch (event.type) {
    case KvEvent::Type::kStored: {
      v1::ChunkEvent::Stored* stored = proto.mutable_stored();
      *stored->mutable_key() = strata::ToProto(event.key);
      if (!event.parent.empty()) *stored->mutable_parent() = strata::ToProto(event.parent);
      stored->set_num_tokens(event.num_tokens);
      break;
    }
    case KvEvent::Type::kRemoved:
      *proto.mutable_removed()->mutable_key() = strata::ToProto(event.key);
      proto.mutable_removed()->set_cause(ToProto(event.cause));
      break;
    case KvEvent::Type::kCleared:
      proto.mutable_cleared();
      break;
  }
}

}  // namespace

WatchEventsReactor::WatchEventsReactor(EventLog* log, uint64_t from_sequence)
    : log_(log), next_sequence_(from_sequence == 0 ? log->next_sequence() : from_sequence) {
  Pump();
}

void WatchEventsReactor::Pump() {
  // gRPC may run callbacks inline from StartWrite and Finish: call them without mu_ held.
  std::optional<grpc::Status> finish;
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || finished_) return;
    if (cancelled_) {
      finish = grpc::Status::CANCELLED;
    } else {
      absl::StatusOr<EventLog::ReadResult> read =
          log_->Read(next_sequence_, kMaxEventsPerResponse, this);
      if (!read.ok()) {
        finish = ToGrpcStatus(read.status());
      } else {
        if (read->events.empty() && sent_first_) return;  // registered: Wake calls Pump again
        response_.Clear();
        response_.set_epoch(log_->epoch());
        for (const KvEvent& event : read->events) ToProto(event, *response_.add_events());
        response_.set_next_sequence(read->next_sequence);
        next_sequence_ = read->next_sequence;
        sent_first_ = true;
        writing_ = true;
      }
    }
    if (finish.has_value()) finished_ = true;
  }
  if (finish.has_value()) {
    Finish(*finish);
  } else {
    StartWrite(&response_);  // response_ is left alone until OnWriteDone
  }
}

void WatchEventsReactor::OnWriteDone(bool ok) {
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) cancelled_ = true;  // the stream is broken: finish
  }
  Pump();
}

void WatchEventsReactor::OnCancel() {
  {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (writing_ || finished_) return;  // OnWriteDone finishes
    finished_ = true;
  }
  Finish(grpc::Status::CANCELLED);
}

void WatchEventsReactor::OnDone() {
  log_->Unregister(this);
  delete this;
}

void WatchEventsReactor::Wake() { Pump(); }

}  // namespace strata::daemon
