// DevicePools holds the daemon's T0 pools (device_pool.h): one per layout that engines handshake
// with (a model and a tensor-parallel rank: its pages are that rank's KV blocks), each of the
// configured size, created by the first handshake that asks for it.
//
// Thread-safety: every method is thread-safe; pools, once created, live as long as DevicePools
// and are thread-safe themselves. ForLayout allocates a new layout's pool under the lock, on the
// caller's thread (the daemon's session thread, at that layout's first handshake): a host
// backend's pool is faulted in then, which takes about a second per few GiB. Ownership: owns the
// pools; borrows the runtime, which must outlive it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/kv_layout.h"
#include "storage/device/device_pool.h"
#include "storage/device/device_runtime.h"

namespace strata::storage {

struct DevicePoolsOptions {
  // Device memory of each layout's pool; its pages are as many whole pages as fit.
  uint64_t bytes_per_layout = 0;
  // Tokens of one page: the engines' KV block size.
  uint32_t block_tokens = 16;
  // Told of every chunk a pool evicts (DevicePoolOptions::on_evict: under that pool's lock,
  // while the pages still hold the chunk), with the pool's layout. Null: evicted chunks are
  // dropped.
  std::function<void(const KvLayout& layout, const DevicePool& pool, const ChunkKey& key,
                     std::span<const uint32_t> pages)>
      on_evict;
  // Told of every chunk that becomes evictable in a pool (DevicePoolOptions::on_evictable: under
  // that pool's lock), with the pool's layout. Null: nobody is told.
  std::function<void(const KvLayout& layout, DevicePool& pool, const ChunkKey& key, uint64_t owner)>
      on_evictable;
};

// One pool's figures, for metrics and status.
struct LayoutPoolStats {
  uint64_t layout_fingerprint = 0;
  std::string model_id;
  uint32_t tp_rank = 0;
  DevicePoolStats pool;
};

class DevicePools {
 public:
  DevicePools(DeviceRuntime& runtime, DevicePoolsOptions options);
  DevicePools(const DevicePools&) = delete;
  DevicePools& operator=(const DevicePools&) = delete;
  ~DevicePools();

  // The pool of `layout`, created now by the first call for it. kInvalidArgument when the layout
  // cannot have one (block_tokens does not divide its chunks, or not one page fits the budget);
  // the runtime's errors (kResourceExhausted when the memory is not there). A failure is kept:
  // later calls for the layout return it without trying to allocate again.
  absl::StatusOr<DevicePool*> ForLayout(const KvLayout& layout);

  uint32_t block_tokens() const { return options_.block_tokens; }
  const DeviceCapabilities& capabilities() const { return runtime_.Capabilities(); }
  // The pools created so far, by layout fingerprint order.
  std::vector<LayoutPoolStats> Stats() const;

 private:
  struct Entry {
    KvLayout layout;
    std::unique_ptr<DevicePool> pool;  // null when creating it failed
    absl::Status failure;
  };

  DeviceRuntime& runtime_;
  const DevicePoolsOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> pools_ ABSL_GUARDED_BY(mu_);
};

}  // namespace strata::storage
