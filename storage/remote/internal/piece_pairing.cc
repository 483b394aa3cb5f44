#include "storage/remote/internal/piece_pairing.h"

#include <algorithm>

namespace strata::storage::remote::internal {

absl::StatusOr<std::vector<Segment>> PairPieces(std::span<const RemoteRange> ranges,
                                                std::span<const std::span<std::byte>> parts) {
  std::vector<Segment> segments;
  size_t part = 0;
  uint64_t part_used = 0;
  for (const RemoteRange& range : ranges) {
    uint64_t range_used = 0;
    while (range_used < range.length) {
      while (part < parts.size() && part_used == parts[part].size()) {
        ++part;
        part_used = 0;
      }
      if (part == parts.size()) break;
      const uint64_t take = std::min(range.length - range_used, parts[part].size() - part_used);
      segments.push_back({.remote_offset = range.offset + range_used,
                          .local = parts[part].subspan(part_used, take)});
      range_used += take;
      part_used += take;
    }
    if (range_used != range.length) {
      return absl::DataLossError("remote: the peer's chunk is larger than its destination");
    }
  }
  uint64_t left = part < parts.size() ? parts[part].size() - part_used : 0;
  for (size_t i = part + 1; i < parts.size(); ++i) left += parts[i].size();
  if (left != 0) {
    return absl::DataLossError("remote: the peer's chunk is smaller than its destination");
  }
  return segments;
}

}  // namespace strata::storage::remote::internal
