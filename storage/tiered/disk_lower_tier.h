// DiskLowerTier registers the disk tier (storage/disk) with a TieredStore: the LowerTier
// interface over a DiskTier, which knows nothing of the store. Thread-safe as DiskTier is; the
// DiskTier is not owned and must outlive it.
#pragma once

#include "storage/disk/disk_tier.h"
#include "storage/tiered/lower_tier.h"

namespace strata::storage {

class DiskLowerTier final : public LowerTier {
 public:
  explicit DiskLowerTier(DiskTier* disk) : disk_(disk) {}

  Tier tier() const override { return Tier::kDisk; }
  std::optional<ChunkInfo> Lookup(const ChunkKey& key) const override;
  absl::StatusOr<ListPage> List(const ListOptions& options) const override;
  std::vector<absl::Status> PutBatch(std::span<const Put> puts) override;
  std::vector<absl::Status> ReadBatch(std::span<const ChunkKey> keys,
                                      std::span<const MutableParts> destinations) override;
  absl::StatusOr<bool> Remove(const ChunkKey& key) override { return disk_->Remove(key); }
  absl::StatusOr<RemoveResult> RemoveIf(
      absl::FunctionRef<bool(const ChunkKey&)> predicate) override;
  absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions) override {
    return disk_->RegisterMemory(regions);
  }
  LowerTierStats Stats() const override;

  DiskTier& disk() const { return *disk_; }

 private:
  DiskTier* const disk_;
};

}  // namespace strata::storage
