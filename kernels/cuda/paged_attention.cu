#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/internal/validate.h"

namespace strata::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerCta = 16;
constexpr int kRowsPerWarp = kRowsPerCta / kWarps;
constexpr int kKeyTile = 32;
constexpr int kDimsPerLane = static_cast<int>(kMaxAttentionHeadDim) / 32;

struct AttentionParams {
  const void* q;
  int q_dtype;
  int64_t q_token_stride, q_head_stride;
  void* out;
  int out_dtype;
  int64_t out_token_stride, out_head_stride;
  int64_t num_tokens, q_heads, group, head_dim;
  const void* k;
  const void* v;
  int64_t num_blocks, block_size, block_stride, slot_stride, head_stride, dim_stride;
  // The second cache (PagedAttentionArgs::shared_kv): block ids from num_blocks on.
  const void* shared_k;
  const void* shared_v;
  int64_t shared_num_blocks, shared_block_stride, shared_slot_stride, shared_head_stride;
  const int32_t* block_table;
  int64_t max_blocks;
  const int32_t* seq_lens;
  const int32_t* query_start_loc;
  const int64_t* query_positions;
  const int64_t* block_positions;  // may be null
  const uint8_t* masked_keys;      // may be null: [seq][max_blocks * block_size]
  const float* cos_sin;            // null: no RoPE
  int64_t max_position, rotary_dim;
  int neox;
  float scale;
  int causal;
  int splits;
  int64_t max_query_len;
  int vector_loads;  // K / V rows are read 16 bytes at a time (alignment checked on the host)
  float* partials;   // [num_tokens][q_heads][splits][head_dim + 2] when splits > 1
  uint32_t* error_flags;
};

size_t SharedBytes(int64_t head_dim) {
  return static_cast<size_t>(kRowsPerCta * head_dim + kKeyTile * (head_dim + 1) +
                             kKeyTile * head_dim) *
         sizeof(float);
}

template <class TKV>
__global__ void __launch_bounds__(kThreads) AttentionKernel(AttentionParams p) {
  extern __shared__ float smem[];
  // Element offset of the key's row of this KV head, -1: skip the key; and its cache (0: the
  // engine's, 1: the shared one).
  __shared__ int64_t key_offset[kKeyTile];
  __shared__ int key_cache[kKeyTile];
  __shared__ int64_t key_position[kKeyTile];
  __shared__ int64_t row_position[kRowsPerCta];
  __shared__ int row_ok[kRowsPerCta];

  const int dim = static_cast<int>(p.head_dim);
  const int padded = dim + 1;
  float* q_s = smem;                     // [kRowsPerCta][dim]
  float* k_s = q_s + kRowsPerCta * dim;  // [kKeyTile][dim + 1]
  float* v_s = k_s + kKeyTile * padded;  // [kKeyTile][dim]
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t seq = blockIdx.y;
  const int64_t kv_head = blockIdx.z;
  const int64_t tile = blockIdx.x / p.splits;
  const int split = static_cast<int>(blockIdx.x % p.splits);
  const bool rope = p.cos_sin != nullptr;
  const int64_t half = p.rotary_dim / 2;

  const int64_t q_begin = p.query_start_loc[seq];
  const int64_t q_end = p.query_start_loc[seq + 1];
  const int64_t num_queries = q_end - q_begin;
  const int64_t seq_len = p.seq_lens[seq];
  if (q_begin < 0 || q_end > p.num_tokens || num_queries < 0 || num_queries > p.max_query_len ||
      seq_len < num_queries || seq_len > p.max_blocks * p.block_size ||
      (seq == 0 && q_begin != 0) || (seq + 1 == gridDim.y && q_end != p.num_tokens)) {
    if (threadIdx.x == 0) internal::ReportError(p.error_flags, kDeviceErrorSequence);
    return;
  }
  const int64_t rows_total = num_queries * p.group;
  const int64_t row0 = tile * kRowsPerCta;
  if (row0 >= rows_total) return;
  const int rows_here = static_cast<int>(min(int64_t{kRowsPerCta}, rows_total - row0));
  const int64_t context = seq_len - num_queries;
  const int64_t last_query = context + (row0 + rows_here - 1) / p.group;
  const int64_t kv_end = p.causal ? min(seq_len, last_query + 1) : seq_len;
  const int64_t blocks = (kv_end + p.block_size - 1) / p.block_size;
  const int64_t block_begin = blocks * split / p.splits;
  const int64_t block_end = blocks * (split + 1) / p.splits;
  const int64_t key_begin = block_begin * p.block_size;
  const int64_t key_end = min(block_end * p.block_size, kv_end);

  // Query rows: load, then rotate at their positions.
  if (threadIdx.x < rows_here) {
    const int64_t token = q_begin + (row0 + threadIdx.x) / p.group;
    const int64_t position = rope ? p.query_positions[token] : 0;
    const bool ok = !rope || (position >= 0 && position < p.max_position);
    if (!ok) internal::ReportError(p.error_flags, kDeviceErrorPosition);
    row_position[threadIdx.x] = position;
    row_ok[threadIdx.x] = ok;
  }
  for (int e = threadIdx.x; e < rows_here * dim; e += kThreads) {
    const int r = e / dim;
    const int d = e - r * dim;
    const int64_t grow = row0 + r;
    const int64_t token = q_begin + grow / p.group;
    const int64_t head = kv_head * p.group + grow % p.group;
    q_s[e] =
        internal::LoadAny(p.q, p.q_dtype, token * p.q_token_stride + head * p.q_head_stride + d);
  }
  __syncthreads();
  if (rope) {
    for (int64_t e = threadIdx.x; e < rows_here * half; e += kThreads) {
      const int r = static_cast<int>(e / half);
      const int64_t i = e - r * half;
      if (!row_ok[r]) continue;
      const int64_t a = p.neox ? i : 2 * i;
      const int64_t b = p.neox ? i + half : 2 * i + 1;
      const float* row = p.cos_sin + row_position[r] * p.rotary_dim;
      const float c = row[i], s = row[half + i];
      const float x = q_s[r * dim + a], y = q_s[r * dim + b];
      q_s[r * dim + a] = x * c - y * s;
      q_s[r * dim + b] = y * c + x * s;
    }
  }

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][kDimsPerLane];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY;
    l[rr] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kDimsPerLane; ++kk) acc[rr][kk] = 0.0f;
  }

  const TKV* k_caches[2] = {static_cast<const TKV*>(p.k), static_cast<const TKV*>(p.shared_k)};
  const TKV* v_caches[2] = {static_cast<const TKV*>(p.v), static_cast<const TKV*>(p.shared_v)};
  for (int64_t k0 = key_begin; k0 < key_end; k0 += kKeyTile) {
    const int keys = static_cast<int>(min(int64_t{kKeyTile}, key_end - k0));
    __syncthreads();  // the previous tile (and the query setup) is done with shared memory
    if (threadIdx.x < kKeyTile) {
      const int t = threadIdx.x;
      int64_t offset = -1;
      int64_t position = 0;
      int cache = 0;
      if (t < keys) {
        const int64_t index = k0 + t;
        const int64_t j = index / p.block_size;
        const int64_t slot = index - j * p.block_size;
        const int64_t block = p.block_table[seq * p.max_blocks + j];
        if (block < 0 || block >= p.num_blocks + p.shared_num_blocks) {
          internal::ReportError(p.error_flags, kDeviceErrorBlockId);
        } else {
          position = (p.block_positions != nullptr ? p.block_positions[seq * p.max_blocks + j]
                                                   : j * p.block_size) +
                     slot;
          if (rope && (position < 0 || position >= p.max_position)) {
            internal::ReportError(p.error_flags, kDeviceErrorPosition);
          } else if (p.masked_keys != nullptr &&
                     p.masked_keys[seq * p.max_blocks * p.block_size + index] != 0) {
            // A masked key: skipped as an unread slot is.
          } else if (block < p.num_blocks) {
            offset = block * p.block_stride + slot * p.slot_stride + kv_head * p.head_stride;
          } else {
            cache = 1;
            offset = (block - p.num_blocks) * p.shared_block_stride + slot * p.shared_slot_stride +
                     kv_head * p.shared_head_stride;
          }
        }
      }
      key_offset[t] = offset;
      key_cache[t] = cache;
      key_position[t] = position;
    }
    __syncthreads();
    if (p.vector_loads) {
      constexpr int kPer = 16 / sizeof(TKV);  // elements per 16-byte load
      const int per_key = dim / kPer;
      for (int e = threadIdx.x; e < kKeyTile * per_key; e += kThreads) {
        const int t = e / per_key;
        const int d0 = (e - t * per_key) * kPer;
        TKV kx[kPer], vx[kPer];
        const int64_t offset = key_offset[t];
        if (offset >= 0) {  // slots beyond seq_len are never read
          const int64_t o = offset + d0;
          const uint4 kr = *reinterpret_cast<const uint4*>(k_caches[key_cache[t]] + o);
          const uint4 vr = *reinterpret_cast<const uint4*>(v_caches[key_cache[t]] + o);
          memcpy(kx, &kr, sizeof(kr));
          memcpy(vx, &vr, sizeof(vr));
        }
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          k_s[t * padded + d0 + i] = offset >= 0 ? internal::ToF32(kx[i]) : 0.0f;
          v_s[t * dim + d0 + i] = offset >= 0 ? internal::ToF32(vx[i]) : 0.0f;
        }
      }
    } else {
      for (int e = threadIdx.x; e < kKeyTile * dim; e += kThreads) {
        const int t = e / dim;
        const int d = e - t * dim;
        float kv = 0.0f, vv = 0.0f;
        const int64_t offset = key_offset[t];
        if (offset >= 0) {  // slots beyond seq_len are never read
          const int64_t o = offset + d * p.dim_stride;
          kv = internal::ToF32(k_caches[key_cache[t]][o]);
          vv = internal::ToF32(v_caches[key_cache[t]][o]);
        }
        k_s[t * padded + d] = kv;
        v_s[t * dim + d] = vv;
      }
    }
    __syncthreads();
    if (rope) {
      for (int64_t e = threadIdx.x; e < kKeyTile * half; e += kThreads) {
        const int t = static_cast<int>(e / half);
        const int64_t i = e - t * half;
        if (key_offset[t] < 0) continue;
        const int64_t a = p.neox ? i : 2 * i;
        const int64_t b = p.neox ? i + half : 2 * i + 1;
        const float* row = p.cos_sin + key_position[t] * p.rotary_dim;
        const float c = row[i], s = row[half + i];
        const float x = k_s[t * padded + a], y = k_s[t * padded + b];
        k_s[t * padded + a] = x * c - y * s;
        k_s[t * padded + b] = y * c + x * s;
      }
      __syncthreads();
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = warp + rr * kWarps;
      if (r >= rows_here || !row_ok[r]) continue;  // uniform across the warp
      const int64_t query_index = context + (row0 + r) / p.group;
      const int64_t key_index = k0 + lane;
      const bool visible =
          lane < keys && key_offset[lane] >= 0 && (!p.causal || key_index <= query_index);
      float score = -INFINITY;
      if (visible) {
        const float* qr = q_s + r * dim;
        const float* kr = k_s + lane * padded;
        float dot = 0.0f;
        for (int d = 0; d < dim; ++d) dot += qr[d] * kr[d];
        score = dot * p.scale;
      }
      // Skip a tile with no visible key. (A visible key whose score is NaN, from NaN in the cache,
      // propagates into the output as in the CPU reference; fmaxf alone would drop it.)
      if (!__any_sync(0xffffffffu, visible)) continue;
      const float tile_max = internal::WarpMax(score);
      const float m_new = fmaxf(m[rr], tile_max);
      const float correction = expf(m[rr] - m_new);
      const float prob = visible ? expf(score - m_new) : 0.0f;
      l[rr] = l[rr] * correction + internal::WarpSum(prob);
#pragma unroll
      for (int kk = 0; kk < kDimsPerLane; ++kk) acc[rr][kk] *= correction;
      for (int t = 0; t < keys; ++t) {
        const float pt = __shfl_sync(0xffffffffu, prob, t);
        if (pt == 0.0f) continue;  // masked keys never touch the accumulator
#pragma unroll
        for (int kk = 0; kk < kDimsPerLane; ++kk) {
          const int d = lane + 32 * kk;
          if (d < dim) acc[rr][kk] += pt * v_s[t * dim + d];
        }
      }
      m[rr] = m_new;
    }
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp + rr * kWarps;
    if (r >= rows_here) continue;
    const int64_t grow = row0 + r;
    const int64_t token = q_begin + grow / p.group;
    const int64_t head = kv_head * p.group + grow % p.group;
    if (p.splits == 1) {
      const float inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f;
#pragma unroll
      for (int kk = 0; kk < kDimsPerLane; ++kk) {
        const int d = lane + 32 * kk;
        if (d < dim) {
          internal::StoreAny(p.out, p.out_dtype,
                             token * p.out_token_stride + head * p.out_head_stride + d,
                             acc[rr][kk] * inv);
        }
      }
    } else {
      float* part = p.partials + ((token * p.q_heads + head) * p.splits + split) * (p.head_dim + 2);
      if (lane == 0) {
        part[0] = m[rr];
        part[1] = l[rr];
      }
#pragma unroll
      for (int kk = 0; kk < kDimsPerLane; ++kk) {
        const int d = lane + 32 * kk;
        if (d < dim) part[2 + d] = acc[rr][kk];
      }
    }
  }
}

// Merges the splits' partial states of one (token, head) by log-sum-exp.
__global__ void MergeKernel(AttentionParams p) {
  const int64_t index = blockIdx.x;
  const int64_t token = index / p.q_heads;
  const int64_t head = index - token * p.q_heads;
  const int64_t stride = p.head_dim + 2;
  const float* part = p.partials + index * p.splits * stride;
  // A split that saw no key has l == 0 and is skipped; a NaN (from NaN in the cache) propagates, as
  // in the CPU reference.
  float m = -INFINITY;
  for (int k = 0; k < p.splits; ++k) {
    if (part[k * stride + 1] != 0.0f) m = fmaxf(m, part[k * stride]);
  }
  float l = 0.0f;
  for (int k = 0; k < p.splits; ++k) {
    const float lk = part[k * stride + 1];
    if (lk != 0.0f) l += lk * expf(part[k * stride] - m);
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int64_t d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    float a = 0.0f;
    for (int k = 0; k < p.splits; ++k) {
      if (part[k * stride + 1] != 0.0f) a += part[k * stride + 2 + d] * expf(part[k * stride] - m);
    }
    internal::StoreAny(p.out, p.out_dtype,
                       token * p.out_token_stride + head * p.out_head_stride + d, a * inv);
  }
}

absl::Status ValidateCuda(const PagedAttentionArgs& a) {
  if (absl::Status s = kernels::internal::ValidatePagedAttentionShapes(a); !s.ok()) return s;
  if (a.q.head_dim > kMaxAttentionHeadDim) {
    return kernels::internal::Invalid("attention", "the CUDA kernel supports head_dim <= " +
                                                       std::to_string(kMaxAttentionHeadDim) +
                                                       ", not " + std::to_string(a.q.head_dim));
  }
  if (a.seq_lens.size() > 65535 || a.kv_spec.num_kv_heads > 65535) {
    return kernels::internal::Invalid("attention", "more than 65535 sequences or KV heads");
  }
  if (a.q.num_tokens * a.q.num_heads > INT32_MAX) {
    return kernels::internal::Invalid("attention", "too many query rows");
  }
  return absl::OkStatus();
}

}  // namespace

size_t PagedAttentionWorkspaceBytes(const PagedAttentionArgs& a) {
  if (a.num_kv_splits <= 1) return 0;
  return static_cast<size_t>(a.q.num_tokens * a.q.num_heads * a.num_kv_splits *
                             (a.q.head_dim + 2)) *
         sizeof(float);
}

absl::Status PagedAttention(const PagedAttentionArgs& a, void* workspace, size_t workspace_bytes,
                            const LaunchOptions& options) {
  if (absl::Status s = ValidateCuda(a); !s.ok()) return s;
  const size_t need = PagedAttentionWorkspaceBytes(a);
  if (need > 0 && (workspace == nullptr || workspace_bytes < need)) {
    return kernels::internal::Invalid(
        "attention workspace",
        std::to_string(workspace_bytes) + " bytes given, " + std::to_string(need) + " needed");
  }
  const int64_t group = a.q.num_heads / a.kv_spec.num_kv_heads;
  AttentionParams p{};
  p.q = a.q.data;
  p.q_dtype = static_cast<int>(a.q.dtype);
  p.q_token_stride = a.q.token_stride;
  p.q_head_stride = a.q.head_stride;
  p.out = a.out.data;
  p.out_dtype = static_cast<int>(a.out.dtype);
  p.out_token_stride = a.out.token_stride;
  p.out_head_stride = a.out.head_stride;
  p.num_tokens = a.q.num_tokens;
  p.q_heads = a.q.num_heads;
  p.group = group;
  p.head_dim = a.q.head_dim;
  p.k = a.kv.planes[0];
  p.v = a.kv.planes[1];
  p.num_blocks = a.kv_spec.num_blocks;
  p.block_size = a.kv_spec.block_size;
  p.block_stride = a.kv_spec.block_stride;
  p.slot_stride = a.kv_spec.slot_stride;
  p.head_stride = a.kv_spec.head_stride;
  p.dim_stride = a.kv_spec.dim_stride;
  p.shared_k = a.shared_kv.planes[0];
  p.shared_v = a.shared_kv.planes[1];
  p.shared_num_blocks = a.shared_spec.num_blocks;
  p.shared_block_stride = a.shared_spec.block_stride;
  p.shared_slot_stride = a.shared_spec.slot_stride;
  p.shared_head_stride = a.shared_spec.head_stride;
  p.block_table = a.block_table.data();
  p.max_blocks = a.max_blocks_per_seq;
  p.seq_lens = a.seq_lens.data();
  p.query_start_loc = a.query_start_loc.data();
  p.query_positions = a.query_positions.data();
  p.block_positions = a.block_positions.empty() ? nullptr : a.block_positions.data();
  p.masked_keys = a.masked_keys.empty() ? nullptr : a.masked_keys.data();
  p.cos_sin = a.rope.cos_sin;
  p.max_position = a.rope.max_position;
  p.rotary_dim = a.rope.rotary_dim;
  p.neox = a.rope.style == RopeStyle::kNeox;
  p.scale = a.scale > 0 ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.q.head_dim));
  p.causal = a.causal;
  p.splits = static_cast<int>(a.num_kv_splits);
  p.max_query_len = a.max_query_len > 0 ? a.max_query_len : a.q.num_tokens;
  {
    const int64_t per = 16 / DtypeSizeBytes(a.kv_spec.dtype);
    const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    const auto strides_fit = [&](const PagedKvSpec& spec) {
      return spec.block_stride % per == 0 && spec.slot_stride % per == 0 &&
             spec.head_stride % per == 0;
    };
    p.vector_loads = a.kv_spec.dim_stride == 1 && a.q.head_dim % per == 0 &&
                     strides_fit(a.kv_spec) && aligned(p.k) && aligned(p.v) &&
                     (a.shared_spec.num_blocks == 0 ||
                      (strides_fit(a.shared_spec) && aligned(p.shared_k) && aligned(p.shared_v)));
  }
  p.partials = static_cast<float*>(workspace);
  p.error_flags = options.error_flags;

  const int64_t tiles = internal::CeilDiv(p.max_query_len * group, kRowsPerCta);
  if (tiles * a.num_kv_splits > INT32_MAX) {
    return kernels::internal::Invalid("attention", "grid too large");
  }
  const dim3 grid(static_cast<unsigned>(tiles * a.num_kv_splits),
                  static_cast<unsigned>(a.seq_lens.size()),
                  static_cast<unsigned>(a.kv_spec.num_kv_heads));
  const size_t smem = SharedBytes(a.q.head_dim);
  absl::Status status = absl::OkStatus();
  internal::DispatchDtype(a.kv_spec.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (smem > 48 * 1024) {
      status.Update(CudaStatus(
          cudaFuncSetAttribute(AttentionKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)),
          "attention shared memory"));
      if (!status.ok()) return;
    }
    AttentionKernel<T><<<grid, kThreads, smem, options.stream>>>(p);
    status.Update(internal::LaunchStatus("paged attention"));
  });
  if (!status.ok() || p.splits == 1) return status;
  MergeKernel<<<static_cast<unsigned>(a.q.num_tokens * a.q.num_heads), 64, 0, options.stream>>>(p);
  return internal::LaunchStatus("paged attention merge");
}

}  // namespace strata::kernels::cuda
