// Test support for the kernels: a typed host buffer, random fills, and straightforward fp64
// reference implementations (RoPE, dense attention through a block table) that the CPU and CUDA
// kernel tests compare against. Test-only code; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "core/kv_layout.h"
#include "kernels/dtype.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"

namespace strata::kernels::testing {

// A host buffer of `size` elements of a float dtype (fp16 / bf16 / fp32).
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(KvDtype dtype, int64_t size);

  KvDtype dtype() const { return dtype_; }
  int64_t size() const { return size_; }
  int64_t size_bytes() const { return static_cast<int64_t>(bytes_.size()); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  float Get(int64_t i) const;
  void Set(int64_t i, float v);  // rounds to the dtype
  void Fill(float v);
  // Fills with N(mean, stddev) values rounded to the dtype.
  void FillNormal(std::mt19937_64& rng, float stddev = 1.0f, float mean = 0.0f);
  // Fills with the bit pattern of a quiet NaN.
  void FillNan();
  std::vector<float> ToFloats() const;

 private:
  KvDtype dtype_ = KvDtype::kFloat32;
  int64_t size_ = 0;
  std::vector<std::byte> bytes_;
};

// fp64 inverse frequencies for `config` (ALGORITHMS.md section 1 formulas).
std::vector<double> InvFreqF64(const RopeConfig& config);

// RoPE of x (head_dim values) at real-valued `position` (may be negative), in fp64 with fp64
// angles position * inv_freq[i].
void RopeF64(std::span<double> x, const RopeConfig& config, std::span<const double> inv_freq,
             double position);

// Dense fp64 attention for the arguments of a PagedAttention call (host memory): gathers K and V
// through the block table, applies RoPE in fp64 (fp64 angles from args' table config `rope_config`
// when args.rope is non-empty), GQA, the causal mask and masked keys, softmax in fp64 (a query
// that sees no key gets zeros). Returns out[t][h][d].
std::vector<double> DenseAttentionF64(const PagedAttentionArgs& args,
                                      const RopeConfig& rope_config);

// A paged NoPE cache with a few sequences and everything a PagedAttention call needs (host memory).
// Blocks are assigned in a random physical order; slots beyond each sequence's length hold NaN;
// each sequence's queries are its last `query_len` keys at positions seq_len - query_len + i.
struct AttentionProblem {
  KvDtype kv_dtype = KvDtype::kFloat32;
  int64_t num_blocks = 0, block_size = 0, kv_heads = 0, q_heads = 0, dim = 0, max_blocks = 0;
  std::vector<int32_t> seq_lens;
  HostTensor k, v, q;  // q is fp32
  std::vector<int32_t> block_table, query_start_loc;
  std::vector<int64_t> query_positions, block_positions;
  std::vector<uint8_t> masked_keys;  // empty: none
  RopeConfig rope_config;            // fp64-precision table, max_position 4096
  std::optional<RopeTable> rope;
  bool causal = true;
  int64_t splits = 1;

  // The second cache (PagedAttentionArgs::shared_kv; none while shared_blocks is 0), in the HND
  // stride order, so that its strides differ from the engine cache's.
  int64_t shared_blocks = 0;
  HostTensor shared_k, shared_v;

  PagedKvSpec Spec() const;
  PagedKvSpec SharedSpec() const;
  // Moves each (sequence, logical block) into a block of a new second cache, in order, and fills
  // its old block with NaN: the block table then names it num_blocks + its index there.
  void MoveToSharedCache(const std::vector<std::pair<int64_t, int64_t>>& blocks);
  int64_t num_tokens() const { return query_start_loc.back(); }
  // Arguments over this problem's host buffers, writing into `out`.
  PagedAttentionArgs Args(HostTensor& out) const;
  // Runs the CPU kernel into a fresh fp32 output.
  absl::Status Run(HostTensor& out) const;
  // The dense fp64 reference.
  std::vector<double> Reference() const;
};

struct AttentionShape {
  int64_t block_size, kv_heads, group, dim;
  RopeStyle style;
};

// seqs: (seq_len, query_len) per sequence.
AttentionProblem MakeAttentionProblem(const AttentionShape& shape,
                                      const std::vector<std::pair<int32_t, int32_t>>& seqs,
                                      uint64_t seed, KvDtype kv_dtype = KvDtype::kFloat32);

// Max |a - b| and max |b|.
struct ErrorStats {
  double max_abs_error = 0;
  double max_ref = 0;
};
ErrorStats Compare(std::span<const float> actual, std::span<const double> expected);

}  // namespace strata::kernels::testing
