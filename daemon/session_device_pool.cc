#include "daemon/session_device_pool.h"

#include "fmt/format.h"
#include "proto/convert.h"

namespace strata::daemon {
namespace {

void AddChunk(v1::PoolChunksResponse& response, const absl::Status& status, uint64_t handle,
              std::span<const uint32_t> pages, std::span<const uint32_t> positions = {}) {
  v1::PoolChunk* chunk = response.add_chunks();
  *chunk->mutable_status() = ToProto(status);
  chunk->set_handle(handle);
  chunk->mutable_pages()->Add(pages.begin(), pages.end());
  chunk->mutable_positions()->Add(positions.begin(), positions.end());
}

}  // namespace

SessionDevicePool::~SessionDevicePool() {
  for (const auto& [handle, reservation] : reservations_) pool_.Abort(reservation);
  for (const auto& [handle, ref] : refs_) (void)pool_.Release(ref);
}

void SessionDevicePool::Lookup(std::span<const ChunkKey> keys,
                               v1::PoolLookupResponse& response) const {
  for (const ChunkKey& key : keys) {
    response.add_resident(pool_.Lookup(std::span<const ChunkKey>(&key, 1)) == 1);
  }
}

void SessionDevicePool::Acquire(std::span<const ChunkKey> keys,
                                absl::FunctionRef<uint64_t()> next_handle,
                                v1::PoolChunksResponse& response) {
  for (const ChunkKey& key : keys) {
    std::optional<storage::PoolChunkRef> ref = pool_.Acquire(key, owner_);
    if (!ref.has_value() && tiering_ != nullptr) {
      absl::StatusOr<bool> promoted = tiering_->Promote(layout_, pool_, key);
      if (promoted.ok() && *promoted) ref = pool_.Acquire(key, owner_);
    }
    if (!ref.has_value()) {
      AddChunk(response,
               absl::NotFoundError(fmt::format("{} is not in the device pool", key.ToString())), 0,
               {});
      continue;
    }
    const uint64_t handle = next_handle();
    refs_.emplace(handle, ref->ref_id);
    AddChunk(response, absl::OkStatus(), handle, ref->pages, ref->positions);
  }
}

void SessionDevicePool::Reserve(std::span<const ChunkKey> keys, std::span<const uint32_t> num_pages,
                                absl::FunctionRef<uint64_t()> next_handle,
                                v1::PoolChunksResponse& response) {
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::StatusOr<storage::PoolReservation> reserved =
        pool_.Reserve(keys[i], num_pages[i], owner_);
    if (!reserved.ok()) {
      AddChunk(response, reserved.status(), 0, {});
      continue;
    }
    switch (reserved->outcome) {
      case storage::PoolReserveOutcome::kAlreadyPresent:
        AddChunk(response,
                 absl::AlreadyExistsError(fmt::format(
                     "{} is in the device pool already: acquire it", keys[i].ToString())),
                 0, {});
        break;
      case storage::PoolReserveOutcome::kInProgress:
        AddChunk(response,
                 absl::AbortedError(
                     fmt::format("another writer holds {} in the device pool", keys[i].ToString())),
                 0, {});
        break;
      case storage::PoolReserveOutcome::kReserved: {
        const uint64_t handle = next_handle();
        reservations_.emplace(handle, reserved->id);
        AddChunk(response, absl::OkStatus(), handle, reserved->pages);
        break;
      }
    }
  }
}

absl::Status SessionDevicePool::Commit(uint64_t handle) {
  auto it = reservations_.find(handle);
  if (it == reservations_.end()) {
    return absl::InvalidArgumentError(
        fmt::format("handle {} is not an open device pool reservation of this session", handle));
  }
  const uint64_t reservation = it->second;
  reservations_.erase(it);
  return pool_.Commit(reservation);
}

absl::Status SessionDevicePool::Abort(uint64_t handle) {
  auto it = reservations_.find(handle);
  if (it == reservations_.end()) {
    return absl::InvalidArgumentError(
        fmt::format("handle {} is not an open device pool reservation of this session", handle));
  }
  pool_.Abort(it->second);
  reservations_.erase(it);
  return absl::OkStatus();
}

absl::Status SessionDevicePool::Release(uint64_t handle) {
  auto it = refs_.find(handle);
  if (it == refs_.end()) {
    return absl::InvalidArgumentError(
        fmt::format("handle {} is not a device pool reference of this session", handle));
  }
  const uint64_t ref = it->second;
  refs_.erase(it);
  return pool_.Release(ref);
}

}  // namespace strata::daemon
