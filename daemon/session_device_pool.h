// SessionDevicePool is one engine session's side of its layout's device pool (T0): the chunks it
// looks up, the references it holds to resident chunks and the pages it has reserved for new
// ones, each under a handle id of the session (EngineSession hands them out, so pool handles and
// host-tier handles never collide). The pool's owner id for everything it holds is the session's.
//
// Not thread-safe: the session server's thread owns it, as it owns the session. Destroying it
// (the session's end, an engine's death included) releases every reference and aborts every
// reservation it holds, so a killed engine leaves no page behind.
#pragma once

#include <cstdint>
#include <span>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/device/device_pool.h"
#include "storage/tiered/device_pool_tiering.h"
#include "strata/v1/engine.pb.h"

namespace strata::daemon {

class SessionDevicePool {
 public:
  // `pool` (of the session's `layout`) and `tiering` (nullable: misses stay misses) must outlive
  // this object; `owner` is the session's id.
  SessionDevicePool(storage::DevicePool& pool, uint64_t owner, const KvLayout& layout,
                    storage::DevicePoolTiering* tiering)
      : pool_(pool), owner_(owner), layout_(layout), tiering_(tiering) {}
  SessionDevicePool(const SessionDevicePool&) = delete;
  SessionDevicePool& operator=(const SessionDevicePool&) = delete;
  ~SessionDevicePool();

  const storage::DevicePool& pool() const { return pool_; }

  // Which of `keys` are resident (PoolLookupResponse.resident, one per key).
  void Lookup(std::span<const ChunkKey> keys, v1::PoolLookupResponse& response) const;
  // A reference to each resident key under a new handle (`next_handle`), NOT_FOUND for the rest.
  // A key the pool lacks but the host tier holds is promoted first (the tiering's copy, on the
  // calling thread).
  void Acquire(std::span<const ChunkKey> keys, absl::FunctionRef<uint64_t()> next_handle,
               v1::PoolChunksResponse& response);
  // Reserves num_pages[i] pages for keys[i] (the sizes match the keys: the caller checked).
  void Reserve(std::span<const ChunkKey> keys, std::span<const uint32_t> num_pages,
               absl::FunctionRef<uint64_t()> next_handle, v1::PoolChunksResponse& response);

  // Whether `handle` is one of this session's pool reservations or references.
  bool Owns(uint64_t handle) const {
    return reservations_.contains(handle) || refs_.contains(handle);
  }
  // Commits or aborts a reservation, releases a reference; kInvalidArgument when `handle` is not
  // one of that kind (the pool's kNotFound for a reservation it aborted meanwhile).
  absl::Status Commit(uint64_t handle);
  absl::Status Abort(uint64_t handle);
  absl::Status Release(uint64_t handle);

  size_t open_handles() const { return reservations_.size() + refs_.size(); }

 private:
  storage::DevicePool& pool_;
  const uint64_t owner_;
  const KvLayout layout_;
  storage::DevicePoolTiering* const tiering_;
  // Session handle -> the pool's reservation id / reference id.
  absl::flat_hash_map<uint64_t, uint64_t> reservations_;
  absl::flat_hash_map<uint64_t, uint64_t> refs_;
};

}  // namespace strata::daemon
