// Rotary position embedding (RoPE): angle tables and the apply / re-rotate kernels' CPU
// references (ALGORITHMS.md section 1).
//
// A RopeTable holds cos_sin[max_position][rotary_dim] = [cos phi_i(p) | sin phi_i(p)] for
// i in [0, rotary_dim/2), built as vLLM's _compute_cos_sin_cache builds it: inverse frequencies,
// the llama3 frequency scaling and the angles p * omega_i in fp32, cos/sin in fp32, then each
// value rounded to `table_dtype` (vLLM casts the cache to the model dtype). AnglePrecision::kFp64
// instead computes frequencies and angles in fp64 (no fp32 angle error at large positions), still
// rounded to fp32 and then `table_dtype`. Table entries are stored as the floats they round to.
//
// Applying RoPE at position p multiplies each pair (x_a, x_b) by the rotation of angle phi_i(p):
// neox pairs (i, i + R/2), gptj pairs (2i, 2i+1); dims at or above rotary_dim pass through. The
// arithmetic is fp32 with one rounding to the output dtype.
//
// RopeTable is immutable after Create and may be shared between threads.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "kernels/tensor_view.h"

namespace strata::kernels {

enum class RopeStyle : uint8_t {
  kNeox = 1,  // rotate-half: pairs (i, i + R/2) (HF / vLLM Llama)
  kGptj = 2,  // interleaved: pairs (2i, 2i + 1)
};

enum class RopeScaling : uint8_t {
  kNone = 1,
  kLlama3 = 2,  // Llama-3.1 frequency scaling (linear in p, so delta re-rotation stays exact)
};

enum class AnglePrecision : uint8_t {
  kVllmFp32 = 1,  // as vLLM: fp32 frequencies and angles (the engine's exact K)
  kFp64 = 2,      // fp64 frequencies and angles, then rounded (accurate at any position)
};

struct Llama3ScalingParams {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 8192.0;
};

struct RopeConfig {
  int64_t rotary_dim = 128;  // even, >= 2
  double theta = 10000.0;    // base; 500000 for Llama-3
  RopeStyle style = RopeStyle::kNeox;
  RopeScaling scaling = RopeScaling::kNone;
  Llama3ScalingParams llama3;
  int64_t max_position = 8192;  // positions [0, max_position) are in the table
  KvDtype table_dtype = KvDtype::kFloat32;
  AnglePrecision precision = AnglePrecision::kVllmFp32;
};

// A non-owning view of a table's cos_sin rows (host memory for the CPU kernels, device memory for
// the CUDA ones). An empty view (cos_sin == nullptr) means "no RoPE" where a kernel allows that.
struct RopeTableView {
  const float* cos_sin = nullptr;  // [max_position][rotary_dim]: cos then sin
  int64_t max_position = 0;
  int64_t rotary_dim = 0;
  RopeStyle style = RopeStyle::kNeox;

  bool empty() const { return cos_sin == nullptr; }
};

class RopeTable {
 public:
  // kInvalidArgument for an odd or non-positive rotary_dim, theta <= 1, a non-positive or huge
  // max_position (more than 2^31 entries), bad llama3 parameters or a non-float table dtype.
  static absl::StatusOr<RopeTable> Create(const RopeConfig& config);

  const RopeConfig& config() const { return config_; }
  int64_t rotary_dim() const { return config_.rotary_dim; }
  int64_t half_dim() const { return config_.rotary_dim / 2; }
  int64_t max_position() const { return config_.max_position; }
  RopeStyle style() const { return config_.style; }
  // The inverse frequencies omega_i actually used (after scaling), as fp32 (kVllmFp32) or fp64.
  std::span<const double> inv_freq() const { return inv_freq_; }
  // [max_position][rotary_dim]: cos values then sin values of each position.
  std::span<const float> cos_sin() const { return cos_sin_; }
  const float* cos_row(int64_t position) const {
    return cos_sin_.data() + position * config_.rotary_dim;
  }
  const float* sin_row(int64_t position) const { return cos_row(position) + half_dim(); }
  RopeTableView view() const {
    return {cos_sin_.data(), config_.max_position, config_.rotary_dim, config_.style};
  }

 private:
  RopeConfig config_;
  std::vector<double> inv_freq_;
  std::vector<float> cos_sin_;
};

// out[t] = RoPE(in[t], positions[t]) for every token and head. `in` and `out` have the same shape
// and dtype and are either the same memory (in place) or disjoint. kInvalidArgument, with nothing
// written, for bad views (see internal::ValidateHeads), rotary_dim > head_dim, a positions span
// whose size is not num_tokens, or a position outside [0, max_position).
absl::Status ApplyRope(const RopeTable& table, const ConstHeadsView& in, const HeadsView& out,
                       std::span<const int64_t> positions);

// Moves already rotated vectors from old_positions[t] to new_positions[t] in place: the inverse
// rotation at the old position, then the forward rotation at the new one, in fp32 registers with
// one final rounding (LMCache's two-step form; no negative table index needed). Same errors as
// ApplyRope, for either position span.
absl::Status ReRotateRope(const RopeTable& table, const HeadsView& x,
                          std::span<const int64_t> old_positions,
                          std::span<const int64_t> new_positions);

namespace internal {
// Validation shared by the CPU and CUDA entry points (the positions' values are checked by the CPU
// entry points only; the CUDA kernels guard them on the device).
absl::Status ValidateRopeViews(const RopeTableView& table, const ConstHeadsView& in,
                               const ConstHeadsView& out, bool in_place_allowed);
// Rotates the pair (x_a, x_b) by the angle with cosine c and sine s.
inline void RotatePair(float& a, float& b, float c, float s) {
  const float x = a;
  const float y = b;
  a = x * c - y * s;
  b = y * c + x * s;
}
// A non-empty view's own consistency: even rotary_dim in [2, 65536], positions in [1, 2^24].
absl::Status ValidateRopeTableView(const RopeTableView& view, std::string_view what);
}  // namespace internal

}  // namespace strata::kernels
