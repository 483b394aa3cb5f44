#include "bench/trace/belady.h"

#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace strata::bench {

double BeladyHitRatio(const Trace& trace, uint64_t capacity_blocks) {
  std::vector<uint64_t> references;
  for (const TraceRequest& request : trace.requests) {
    references.insert(references.end(), request.blocks.begin(), request.blocks.end());
  }
  if (references.empty()) return 0;
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  // next_use[i]: the index of the next reference to references[i]'s block, or kNever.
  std::vector<uint64_t> next_use(references.size(), kNever);
  {
    absl::flat_hash_map<uint64_t, uint64_t> later;
    for (uint64_t i = references.size(); i-- > 0;) {
      auto [it, inserted] = later.try_emplace(references[i], i);
      if (!inserted) {
        next_use[i] = it->second;
        it->second = i;
      }
    }
  }
  // Cached blocks by their next use, furthest last; next uses are distinct reference indexes
  // except kNever, so pair them with the block id.
  std::set<std::pair<uint64_t, uint64_t>> cached;
  absl::flat_hash_map<uint64_t, uint64_t> cached_next;  // block -> its key in `cached`
  uint64_t hits = 0;
  for (uint64_t i = 0; i < references.size(); ++i) {
    const uint64_t block = references[i];
    auto it = cached_next.find(block);
    if (it != cached_next.end()) {
      ++hits;
      cached.erase({it->second, block});
      it->second = next_use[i];
      cached.insert({next_use[i], block});
      continue;
    }
    if (next_use[i] == kNever || capacity_blocks == 0) continue;  // bypass: never used again
    if (cached.size() == capacity_blocks) {
      auto furthest = std::prev(cached.end());
      if (furthest->first <= next_use[i]) continue;  // bypass: used later than every cached
      cached_next.erase(furthest->second);
      cached.erase(furthest);
    }
    cached.insert({next_use[i], block});
    cached_next.emplace(block, next_use[i]);
  }
  return static_cast<double>(hits) / static_cast<double>(references.size());
}

}  // namespace strata::bench
