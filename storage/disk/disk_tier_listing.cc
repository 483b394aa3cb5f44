// DiskTier::List: pages through the index in key order, reporting what the in-memory index holds.
#include "absl/status/status.h"
#include "storage/disk/disk_tier.h"

namespace strata::storage {

absl::StatusOr<DiskChunkPage> DiskTier::List(const DiskListOptions& options) const {
  if (options.limit == 0) return absl::InvalidArgumentError("a disk listing's limit must be >= 1");
  std::vector<ChunkKey> keys;
  keys.reserve(options.limit);
  std::optional<ChunkKey> last;
  absl::StatusOr<bool> more = index_->ForEachAfter(
      options.after, options.limit, [&](const ChunkKey& key, const IndexEntry& entry) {
        last = key;
        if ((options.layout_fingerprint == 0 ||
             entry.layout_fingerprint == options.layout_fingerprint) &&
            (!options.tenant.has_value() || entry.tenant == *options.tenant)) {
          keys.push_back(key);
        }
      });
  if (!more.ok()) return more.status();
  DiskChunkPage page;
  if (*more) page.resume_after = last;
  page.chunks.reserve(keys.size());
  absl::MutexLock lock(&mu_);
  for (const ChunkKey& key : keys) {
    auto it = chunks_.find(key);
    if (it != chunks_.end()) page.chunks.emplace_back(key, InfoOf(it->second.entry));
  }
  return page;
}

}  // namespace strata::storage
