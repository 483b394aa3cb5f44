// CUDA fused-RoPE paged attention over a NoPE cache (see kernels/paged_attention.h for the math,
// layouts and semantics). Every pointer in the arguments, including the spans' data and the RoPE
// table (DeviceRopeTable::view()), is device memory; only sizes and scalars are read on the host.
//
// One thread block handles up to 16 query rows (query token x query head of one GQA group) of one
// sequence and KV head, walks the keys in tiles of 32 (rotating them at their block position plus
// slot in shared memory) with an online softmax in fp32, and either writes the output
// (num_kv_splits == 1) or a partial (max, sum, accumulator) per split into `workspace`, which a
// second kernel merges by log-sum-exp (decode: split the keys of long sequences across blocks).
// Limits of the CUDA kernel beyond the CPU reference: head_dim <= 256, num_seqs and num_kv_heads
// <= 65535 (kInvalidArgument otherwise).
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "kernels/cuda/device.h"
#include "kernels/paged_attention.h"

namespace strata::kernels::cuda {

inline constexpr int64_t kMaxAttentionHeadDim = 256;

// Device workspace bytes PagedAttention needs for `args` (0 when num_kv_splits == 1).
size_t PagedAttentionWorkspaceBytes(const PagedAttentionArgs& args);

// Enqueues the attention. kInvalidArgument (nothing launched) for arguments the CPU reference's
// shape checks reject, for the limits above, or for a workspace smaller than
// PagedAttentionWorkspaceBytes. Device-resident values are checked on the device (kDeviceError*).
absl::Status PagedAttention(const PagedAttentionArgs& args, void* workspace, size_t workspace_bytes,
                            const LaunchOptions& options = {});

}  // namespace strata::kernels::cuda
