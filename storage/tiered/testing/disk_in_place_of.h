// A disk tier standing in another tier's place below the host tier, for tests that compose a
// store of more lower tiers than this machine has kinds of (a second disk tier as the remote
// tier, T3). Every call goes to a real DiskTier through DiskLowerTier; only tier() and the
// tier its stats name are `as`. Test-only.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "storage/disk/disk_tier.h"
#include "storage/tiered/disk_lower_tier.h"
#include "storage/tiered/lower_tier.h"

namespace strata::storage::testing {

class DiskInPlaceOf final : public LowerTier {
 public:
  // Opens a 1 MiB disk tier in `directory` that reports itself as tier `as`.
  static absl::StatusOr<std::unique_ptr<LowerTier>> Open(const std::string& directory, Tier as) {
    absl::StatusOr<std::unique_ptr<DiskTier>> disk = DiskTier::Open(
        {.directory = directory, .capacity_bytes = 1 << 20, .segment_bytes = 64 << 10});
    if (!disk.ok()) return disk.status();
    return std::unique_ptr<LowerTier>(new DiskInPlaceOf(*std::move(disk), as));
  }

  Tier tier() const override { return as_; }
  std::optional<ChunkInfo> Lookup(const ChunkKey& key) const override { return below_.Lookup(key); }
  bool Contains(const ChunkKey& key) const override { return below_.Contains(key); }
  absl::StatusOr<ListPage> List(const ListOptions& options) const override {
    return below_.List(options);
  }
  bool records_tenants() const override { return below_.records_tenants(); }
  std::vector<absl::Status> PutBatch(std::span<const Put> puts) override {
    return below_.PutBatch(puts);
  }
  std::vector<absl::Status> ReadBatch(std::span<const ChunkKey> keys,
                                      std::span<const MutableParts> destinations) override {
    return below_.ReadBatch(keys, destinations);
  }
  absl::StatusOr<bool> Remove(const ChunkKey& key) override { return below_.Remove(key); }
  absl::StatusOr<RemoveResult> RemoveIf(
      absl::FunctionRef<bool(const ChunkKey&)> predicate) override {
    return below_.RemoveIf(predicate);
  }
  absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions) override {
    return below_.RegisterMemory(regions);
  }
  LowerTierStats Stats() const override {
    LowerTierStats stats = below_.Stats();
    stats.tier = as_;
    return stats;
  }

 private:
  DiskInPlaceOf(std::unique_ptr<DiskTier> disk, Tier as)
      : disk_(std::move(disk)), below_(disk_.get()), as_(as) {}

  std::unique_ptr<DiskTier> disk_;
  DiskLowerTier below_;
  const Tier as_;
};

}  // namespace strata::storage::testing
