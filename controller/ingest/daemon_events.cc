#include "controller/ingest/daemon_events.h"

#include <cstddef>

#include "core/fmt_absl.h"
#include "fmt/format.h"
#include "proto/convert.h"

namespace strata::controller {

absl::StatusOr<Tier> TierFromProto(v1::Tier tier) {
  switch (tier) {
    case v1::TIER_DEVICE:
      return Tier::kDevice;
    case v1::TIER_HOST:
      return Tier::kHost;
    case v1::TIER_DISK:
      return Tier::kDisk;
    case v1::TIER_REMOTE:
      return Tier::kRemote;
    default:
      return absl::InvalidArgumentError(fmt::format("unknown tier {}", static_cast<int>(tier)));
  }
}

v1::Tier TierToProto(Tier tier) {
  switch (tier) {
    case Tier::kDevice:
      return v1::TIER_DEVICE;
    case Tier::kHost:
      return v1::TIER_HOST;
    case Tier::kDisk:
      return v1::TIER_DISK;
    case Tier::kRemote:
      return v1::TIER_REMOTE;
  }
  return v1::TIER_UNSPECIFIED;
}

v1::ChunkEvent ToProto(const ChunkEvent& event) {
  v1::ChunkEvent out;
  out.set_tier(TierToProto(event.tier));
  switch (event.kind) {
    case ChunkEventKind::kStored:
      strata::ToProto(event.key, out.mutable_stored()->mutable_key());
      break;
    case ChunkEventKind::kRemoved:
      strata::ToProto(event.key, out.mutable_removed()->mutable_key());
      out.mutable_removed()->set_cause(v1::ChunkEvent::REMOVAL_CAUSE_EVICTED);
      break;
    case ChunkEventKind::kCleared:
      out.mutable_cleared();
      break;
  }
  return out;
}

absl::StatusOr<ChunkEvent> FromProto(const v1::ChunkEvent& event) {
  auto invalid = [&](absl::string_view what) {
    return absl::InvalidArgumentError(fmt::format("event {}: {}", event.sequence(), what));
  };
  absl::StatusOr<Tier> tier = TierFromProto(event.tier());
  if (!tier.ok()) return invalid(tier.status().message());
  ChunkEvent out{.tier = *tier};
  const v1::ChunkKey* key = nullptr;
  switch (event.event_case()) {
    case v1::ChunkEvent::kStored:
      out.kind = ChunkEventKind::kStored;
      key = &event.stored().key();
      break;
    case v1::ChunkEvent::kRemoved:
      out.kind = ChunkEventKind::kRemoved;
      key = &event.removed().key();
      break;
    case v1::ChunkEvent::kCleared:
      out.kind = ChunkEventKind::kCleared;
      return out;
    case v1::ChunkEvent::EVENT_NOT_SET:
      return invalid("no event");
  }
  absl::StatusOr<ChunkKey> parsed = strata::FromProto(*key);
  if (!parsed.ok()) return invalid(parsed.status().message());
  out.key = *parsed;
  return out;
}

absl::Status AppendListedChunks(const v1::ChunkColumns& columns, std::vector<ChunkEvent>& out) {
  const int n = columns.algorithms_size();
  if (columns.namespaces_size() != n || columns.layout_fingerprints_size() != n ||
      columns.tiers_size() != n) {
    return absl::InvalidArgumentError("a ListChunks page's columns differ in length");
  }
  const size_t first = out.size();
  std::string_view digests = columns.digests();
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<HashAlgorithm> algorithm = strata::FromProto(columns.algorithms(i));
    absl::StatusOr<Tier> tier = TierFromProto(columns.tiers(i));
    absl::Status bad = !algorithm.ok() ? algorithm.status() : tier.status();
    if (bad.ok()) {
      const size_t size = DigestSizeBytes(*algorithm);
      if (digests.size() < size) {
        bad = absl::InvalidArgumentError("a ListChunks page's digests end early");
      } else {
        absl::StatusOr<ChunkKey> key =
            ChunkKeyFromFields(columns.algorithms(i), columns.namespaces(i),
                               columns.layout_fingerprints(i), digests.substr(0, size));
        digests.remove_prefix(size);
        if (key.ok()) {
          out.push_back({.kind = ChunkEventKind::kStored, .tier = *tier, .key = *key});
        } else {
          bad = key.status();
        }
      }
    }
    if (!bad.ok()) {
      out.resize(first);
      return absl::InvalidArgumentError(
          fmt::format("chunk {} of a ListChunks page: {}", i, bad.message()));
    }
  }
  if (!digests.empty()) {
    out.resize(first);
    return absl::InvalidArgumentError("a ListChunks page has more digest bytes than keys");
  }
  return absl::OkStatus();
}

}  // namespace strata::controller
