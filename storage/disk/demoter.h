// Movement of chunks between the host tier (T1) and the disk tier (T2).
//
// DiskDemoter is the host tier's EvictionListener: every chunk the host tier evicts is written
// to the disk tier (write-back) before its pages are freed. The write is synchronous, on the
// thread whose HostTier::Reserve needed the space; arena pages are 4 KiB aligned, so the disk
// write reads them in place (no copy). A failed write loses only the cached copy: it is counted
// and the host tier's eviction proceeds. Thread-safe (DiskTier is); does not own the disk tier,
// which must outlive it.
//
// CopyToDisk writes a host chunk to the disk tier on request (Move, Drain).
//
// PromoteFromDisk copies a chunk from the disk tier into the host tier: it reserves the chunk in
// the host tier, reads the disk record straight into the reserved arena pages (no bounce copy
// for page-aligned extents) and commits it. Thread-safe; call it from any thread but never from
// inside an EvictionListener callback (it reserves in the host tier).
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/disk/disk_tier.h"
#include "storage/host/eviction_listener.h"
#include "storage/host/host_tier.h"

namespace strata::storage {

class DiskDemoter final : public EvictionListener {
 public:
  explicit DiskDemoter(DiskTier* disk) : disk_(disk) {}

  void OnEvicted(const ChunkKey& key, const PayloadView& payload, uint64_t checksum,
                 uint32_t num_tokens) override;

  // Chunks written to the disk tier (or found there already), and writes that failed.
  uint64_t demoted() const { return demoted_.load(std::memory_order_relaxed); }
  uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }

 private:
  DiskTier* const disk_;
  std::atomic<uint64_t> demoted_{0};
  std::atomic<uint64_t> failed_{0};
};

enum class PromoteOutcome {
  kPromoted,       // the chunk is committed in the host tier now
  kNotOnDisk,      // a miss in the disk tier
  kAlreadyInHost,  // committed in the host tier already: nothing read
  kInProgress,     // another writer holds a host reservation for the key
};

// Writes the host tier's copy of `key` to `disk` under a read lease; the host copy stays. false
// when the host tier does not hold `key`. The host tier's Acquire errors (kDataLoss: its copy
// failed its checksum and was dropped) and the disk tier's Put errors.
absl::StatusOr<bool> CopyToDisk(HostTier& host, DiskTier& disk, const ChunkKey& key);

// Promotes `key` (a key of `layout`) from `disk` into `host`. kInvalidArgument when the disk
// record's size does not match layout.chunk_bytes(num_tokens); the host tier's Reserve errors
// (kResourceExhausted, ...); the disk tier's Read errors (kDataLoss: the disk copy was dropped;
// kAborted: it left the disk tier meanwhile). On any error the host reservation is aborted.
absl::StatusOr<PromoteOutcome> PromoteFromDisk(DiskTier& disk, HostTier& host,
                                               const KvLayout& layout, const ChunkKey& key);

}  // namespace strata::storage
