// CUDA gather / scatter between an engine's paged KV and Strata chunks (see kernels/kv_transfer.h
// for the layouts and the plan). Chunk buffers and engine layers are device memory (a chunk may
// live in the daemon's T0 pool or in mapped host memory that the device can address).
//
// A TransferPlan is validated on the host once; DeviceTransferPlan::Upload copies its chunk table
// and token list into caller-provided device memory (no allocation here), after which any number
// of layer ranges can be launched on a stream. Up to kMaxLayersPerLaunch layers go in one kernel
// launch; longer ranges are split into several launches on the same stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/device.h"
#include "kernels/kv_transfer.h"

namespace strata::kernels::cuda {

inline constexpr int kMaxLayersPerLaunch = 64;

// A TransferPlan's tables in device memory. Holds no memory itself: the workspace given to Upload
// must stay allocated and unmodified while launches that use the plan are pending.
class DeviceTransferPlan {
 public:
  // Bytes of device workspace Upload needs for `plan` (16-byte aligned pieces).
  static size_t WorkspaceBytes(const TransferPlan& plan);
  // Enqueues the copy of the plan's tables into `workspace` on `stream` (the host plan may be
  // destroyed once this returns). kInvalidArgument for a null or too small workspace.
  static absl::StatusOr<DeviceTransferPlan> Upload(const TransferPlan& plan, void* workspace,
                                                   size_t workspace_bytes, cudaStream_t stream);

  const PagedKvSpec& paged() const { return paged_; }
  const ChunkGeometry& geometry() const { return geometry_; }
  int64_t num_ops() const { return num_ops_; }
  const TransferPlan::Chunk* device_chunks() const { return chunks_; }
  const TransferPlan::TokenOp* device_ops() const { return ops_; }
  // Whether every chunk pointer of the plan is 16-byte aligned (enables vector copies).
  bool chunks_aligned16() const { return chunks_aligned16_; }

 private:
  PagedKvSpec paged_;
  ChunkGeometry geometry_;
  int64_t num_ops_ = 0;
  const TransferPlan::Chunk* chunks_ = nullptr;
  const TransferPlan::TokenOp* ops_ = nullptr;
  bool chunks_aligned16_ = false;
};

// Device versions of kernels::GatherKv / ScatterKv: layers[i] (device plane pointers) is chunk
// layer first_layer + i. kInvalidArgument (nothing launched) as the CPU version; kInternal when a
// launch fails.
absl::Status GatherKv(const DeviceTransferPlan& plan, std::span<const PagedKvLayer> layers,
                      int64_t first_layer, const LaunchOptions& options = {});
absl::Status ScatterKv(const DeviceTransferPlan& plan, std::span<const PagedKvLayer> layers,
                       int64_t first_layer, const LaunchOptions& options = {});

}  // namespace strata::kernels::cuda
