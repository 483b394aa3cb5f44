#include "daemon/watch_events_reactor.h"

#include "daemon/tier_proto.h"
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
  proto.set_tier(daemon::ToProto(event.tier));
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

absl::StatusOr<bool> WatchEventsReactor::Next(v1::WatchEventsResponse& response) {
  absl::StatusOr<EventLog::ReadResult> read =
      log_->Read(next_sequence_, kMaxEventsPerResponse, this);
  if (!read.ok()) return read.status();
  response.set_epoch(log_->epoch());
  for (const KvEvent& event : read->events) ToProto(event, *response.add_events());
  response.set_next_sequence(read->next_sequence);
  next_sequence_ = read->next_sequence;
  return !read->events.empty();  // when empty, the log wakes this waiter: Wake calls Pump again
}

void WatchEventsReactor::OnDone() {
  log_->Unregister(this);
  delete this;
}

}  // namespace strata::daemon
