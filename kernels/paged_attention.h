// Paged attention with RoPE fused in, over a NoPE paged KV cache (MEPIC; ALGORITHMS.md section 2):
// CPU reference. Keys are stored before RoPE; the kernel rotates each query at its position and
// each key at its block's position plus its slot, in fp32, then runs softmax attention with an
// online (flash) softmax. GQA: query head h reads KV head h / (num_q_heads / num_kv_heads).
//
// Sequences: seq s has seq_lens[s] keys, in logical blocks j = 0, 1, ... whose physical block ids
// are block_table[s * max_blocks_per_seq + j]; the key in slot t of logical block j has logical
// index j * block_size + t and position block_positions[s * max_blocks_per_seq + j] + t (or
// j * block_size + t when block_positions is empty). Its queries are tokens
// [query_start_loc[s], query_start_loc[s + 1]) and are the sequence's last keys: query i of n has
// logical index seq_lens[s] - n + i (prefill / append: n > 1; decode: n = 1). With `causal`, a
// query sees keys whose logical index is <= its own; slots at or beyond seq_lens[s] are never read.
// Masked keys (MEPIC's pad tokens: they hold positions but are no tokens of the prompt) are seen
// by no query; a query that sees no key at all gets zeros. Several sequences may share one
// block table row's blocks (a request's tokens recomputed in the middle of its prompt are a
// sequence ending at their last one).
//
// A second cache (MEPIC's shared pages: the daemon's device pool, mapped in the engine) may stand
// beside the engine's: block ids in [kv_spec.num_blocks, kv_spec.num_blocks +
// shared_spec.num_blocks) name its blocks (id - kv_spec.num_blocks), so one block table mixes the
// engine's own pages with shared ones, each at its own positions, and nothing is copied per
// request. Its dtype, block_size, num_kv_heads, head_dim and dim_stride are kv_spec's; its block,
// slot and head strides are its own.
//
// num_kv_splits > 1 splits each sequence's blocks into that many ranges whose partial softmax
// states are merged by log-sum-exp (the decode path of the CUDA kernel; same result up to fp
// error). With an empty RopeTableView the kernel is standard paged attention over already rotated q
// and K. Thread-safety: reentrant; concurrent calls must not share `out`.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/kv_transfer.h"
#include "kernels/rope.h"
#include "kernels/tensor_view.h"

namespace strata::kernels {

struct PagedAttentionArgs {
  ConstHeadsView q;     // [num_query_tokens, num_q_heads, head_dim], before RoPE
  HeadsView out;        // same shape (any float dtype)
  PagedKvSpec kv_spec;  // num_planes == 2 (K, V); head_dim equal to q's
  PagedKvLayer kv;
  PagedKvSpec shared_spec;  // num_blocks 0 (the default): no second cache
  PagedKvLayer shared_kv;
  std::span<const int32_t> block_table;  // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq = 0;
  std::span<const int32_t> seq_lens;         // [num_seqs]
  std::span<const int32_t> query_start_loc;  // [num_seqs + 1], from 0 to num_query_tokens
  std::span<const int64_t> query_positions;  // [num_query_tokens]; unused without RoPE
  std::span<const int64_t> block_positions;  // empty, or [num_seqs, max_blocks_per_seq]
  // Empty, or [num_seqs, max_blocks_per_seq * block_size] by logical key index: non-zero masks
  // that key.
  std::span<const uint8_t> masked_keys;
  RopeTableView rope;  // empty: q and K are already rotated
  float scale = 0.0f;  // 0: 1 / sqrt(head_dim)
  bool causal = true;
  int64_t num_kv_splits = 1;  // in [1, 1024]
  // Optional upper bound of any sequence's query count (0: unknown, taken as num_query_tokens).
  // The CUDA kernel sizes its grid by it; both kernels reject a sequence with more queries.
  int64_t max_query_len = 0;
};

// Writes out[t, h, :] for every query token and head. kInvalidArgument, with nothing written, when
// a view or a size is inconsistent (internal::ValidatePagedAttentionShapes) or when a value is:
// query_start_loc not non-decreasing from 0 to num_query_tokens, a sequence with fewer keys than
// queries, more keys than max_blocks_per_seq * block_size or more queries than max_query_len, a
// block id used by a sequence outside both caches, or a query or key position outside the RoPE
// table; or a second cache whose shape differs from the first's.
absl::Status PagedAttention(const PagedAttentionArgs& args);

namespace internal {
// The checks that need no access to the metadata's values (shared with the CUDA entry point).
absl::Status ValidatePagedAttentionShapes(const PagedAttentionArgs& args);
// The value checks above; host memory.
absl::Status ValidatePagedAttentionValues(const PagedAttentionArgs& args);
}  // namespace internal

}  // namespace strata::kernels
