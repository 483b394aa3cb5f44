// CUDA RoPE: a device copy of a RopeTable, and the apply / re-rotate kernels (same math and
// validation as kernels/rope.h; positions are device arrays, checked on the device: a token whose
// position lies outside the table is left unwritten and kDeviceErrorPosition is reported).
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/device.h"
#include "kernels/rope.h"

namespace strata::kernels::cuda {

// A RopeTable's cos_sin rows in device memory (fp32 values, already rounded to the table dtype).
class DeviceRopeTable {
 public:
  static absl::StatusOr<DeviceRopeTable> Create(const RopeTable& table);
  RopeTableView view() const { return view_; }

 private:
  DeviceBuffer buffer_;
  RopeTableView view_;
};

// out[t] = RoPE(in[t], positions[t]) on the device (views and positions in device memory).
absl::Status ApplyRope(const RopeTableView& table, const ConstHeadsView& in, const HeadsView& out,
                       std::span<const int64_t> positions, const LaunchOptions& options = {});

// In-place move from old_positions[t] to new_positions[t] (two-step, one rounding).
absl::Status ReRotateRope(const RopeTableView& table, const HeadsView& x,
                          std::span<const int64_t> old_positions,
                          std::span<const int64_t> new_positions,
                          const LaunchOptions& options = {});

}  // namespace strata::kernels::cuda
