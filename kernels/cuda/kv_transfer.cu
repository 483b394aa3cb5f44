#include "kernels/cuda/kv_transfer.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/internal/validate.h"

namespace strata::kernels::cuda {
namespace {

constexpr size_t kAlign = 16;

size_t AlignUp(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

struct LayerPointers {
  void* planes[kMaxLayersPerLaunch][2];
};

// Geometry in copy units (16-byte vectors, or single elements).
struct UnitGeometry {
  int num_planes;
  int64_t num_layers;
  int64_t heads;
  int64_t dim_units;       // units per head in a chunk
  int64_t head_stride;     // in units, engine side
  int64_t dim_stride;      // in units, engine side
  int64_t elems_per_unit;  // elements per unit
  int64_t token_elems;     // heads * head_dim elements
};

template <class Unit, bool kToChunk>
__global__ void TransferKernel(const TransferPlan::Chunk* chunks, const TransferPlan::TokenOp* ops,
                               LayerPointers layers, int64_t first_layer, UnitGeometry g) {
  const TransferPlan::TokenOp op = ops[blockIdx.x];
  const TransferPlan::Chunk chunk = chunks[op.chunk];
  const int64_t layer = first_layer + blockIdx.y;
  const int64_t units = g.heads * g.dim_units;
  for (int plane = 0; plane < g.num_planes; ++plane) {
    Unit* paged =
        static_cast<Unit*>(layers.planes[blockIdx.y][plane]) + op.slot_offset / g.elems_per_unit;
    Unit* dense = static_cast<Unit*>(chunk.data) +
                  ((layer * g.num_planes + plane) * chunk.chunk_tokens + op.token) * g.token_elems /
                      g.elems_per_unit;
    for (int64_t e = threadIdx.x; e < units; e += blockDim.x) {
      const int64_t h = e / g.dim_units;
      const int64_t d = e - h * g.dim_units;
      Unit* p = paged + h * g.head_stride + d * g.dim_stride;
      if constexpr (kToChunk) {
        dense[e] = *p;
      } else {
        *p = dense[e];
      }
    }
  }
}

absl::Status Launch(const DeviceTransferPlan& plan, std::span<const PagedKvLayer> layers,
                    int64_t first_layer, const LaunchOptions& options, bool to_chunk) {
  if (absl::Status s = kernels::internal::ValidateTransferLayers(plan.paged(), plan.geometry(),
                                                                 layers, first_layer);
      !s.ok()) {
    return s;
  }
  if (plan.num_ops() == 0) return absl::OkStatus();
  if (plan.num_ops() > INT32_MAX) return kernels::internal::Invalid("transfer", "too many tokens");
  const PagedKvSpec& spec = plan.paged();
  const int64_t esize = DtypeSizeBytes(spec.dtype);
  // 16-byte vectors when every address the kernel forms is 16-byte aligned.
  bool vector = plan.chunks_aligned16() && spec.dim_stride == 1 &&
                (spec.head_dim * esize) % 16 == 0 && (spec.block_stride * esize) % 16 == 0 &&
                (spec.slot_stride * esize) % 16 == 0 &&
                (spec.num_kv_heads == 1 || (spec.head_stride * esize) % 16 == 0);
  for (const PagedKvLayer& l : layers) {
    for (int64_t p = 0; p < spec.num_planes; ++p) {
      vector = vector && reinterpret_cast<uintptr_t>(l.planes[p]) % 16 == 0;
    }
  }
  UnitGeometry g;
  g.num_planes = static_cast<int>(spec.num_planes);
  g.num_layers = plan.geometry().num_layers;
  g.heads = spec.num_kv_heads;
  g.token_elems = spec.num_kv_heads * spec.head_dim;
  g.elems_per_unit = vector ? 16 / esize : 1;
  g.dim_units = spec.head_dim / g.elems_per_unit;
  g.head_stride = spec.head_stride / g.elems_per_unit;
  g.dim_stride = vector ? 1 : spec.dim_stride;
  const int threads = static_cast<int>(std::clamp<int64_t>(g.heads * g.dim_units, 32, 256));
  for (size_t begin = 0; begin < layers.size(); begin += kMaxLayersPerLaunch) {
    const size_t count = std::min<size_t>(kMaxLayersPerLaunch, layers.size() - begin);
    LayerPointers pointers{};
    for (size_t i = 0; i < count; ++i) {
      pointers.planes[i][0] = layers[begin + i].planes[0];
      pointers.planes[i][1] = layers[begin + i].planes[1];
    }
    const dim3 grid(static_cast<unsigned>(plan.num_ops()), static_cast<unsigned>(count));
    const int64_t layer0 = first_layer + static_cast<int64_t>(begin);
    auto run = [&](auto unit_tag) {
      using Unit = decltype(unit_tag);
      if (to_chunk) {
        TransferKernel<Unit, true><<<grid, threads, 0, options.stream>>>(
            plan.device_chunks(), plan.device_ops(), pointers, layer0, g);
      } else {
        TransferKernel<Unit, false><<<grid, threads, 0, options.stream>>>(
            plan.device_chunks(), plan.device_ops(), pointers, layer0, g);
      }
    };
    if (vector) {
      run(uint4{});
    } else if (esize == 2) {
      run(uint16_t{});
    } else {
      run(uint32_t{});
    }
    if (absl::Status s = internal::LaunchStatus(to_chunk ? "gather kv" : "scatter kv"); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t DeviceTransferPlan::WorkspaceBytes(const TransferPlan& plan) {
  return AlignUp(plan.chunks().size() * sizeof(TransferPlan::Chunk)) +
         AlignUp(plan.ops().size() * sizeof(TransferPlan::TokenOp));
}

absl::StatusOr<DeviceTransferPlan> DeviceTransferPlan::Upload(const TransferPlan& plan,
                                                              void* workspace,
                                                              size_t workspace_bytes,
                                                              cudaStream_t stream) {
  const size_t need = WorkspaceBytes(plan);
  if (need > 0 && workspace == nullptr) {
    return kernels::internal::Invalid("transfer workspace", "null pointer");
  }
  if (workspace_bytes < need) {
    return kernels::internal::Invalid(
        "transfer workspace",
        std::to_string(workspace_bytes) + " bytes, " + std::to_string(need) + " needed");
  }
  if (reinterpret_cast<uintptr_t>(workspace) % kAlign != 0) {
    return kernels::internal::Invalid("transfer workspace", "not 16-byte aligned");
  }
  DeviceTransferPlan out;
  out.paged_ = plan.paged();
  out.geometry_ = plan.geometry();
  out.num_ops_ = static_cast<int64_t>(plan.ops().size());
  auto* base = static_cast<char*>(workspace);
  const size_t chunk_bytes = plan.chunks().size() * sizeof(TransferPlan::Chunk);
  out.chunks_ = reinterpret_cast<const TransferPlan::Chunk*>(base);
  out.ops_ = reinterpret_cast<const TransferPlan::TokenOp*>(base + AlignUp(chunk_bytes));
  out.chunks_aligned16_ = std::all_of(
      plan.chunks().begin(), plan.chunks().end(),
      [](const TransferPlan::Chunk& c) { return reinterpret_cast<uintptr_t>(c.data) % 16 == 0; });
  if (chunk_bytes > 0) {
    if (absl::Status s = CudaStatus(cudaMemcpyAsync(base, plan.chunks().data(), chunk_bytes,
                                                    cudaMemcpyHostToDevice, stream),
                                    "upload transfer chunks");
        !s.ok()) {
      return s;
    }
  }
  const size_t op_bytes = plan.ops().size() * sizeof(TransferPlan::TokenOp);
  if (op_bytes > 0) {
    if (absl::Status s = CudaStatus(cudaMemcpyAsync(base + AlignUp(chunk_bytes), plan.ops().data(),
                                                    op_bytes, cudaMemcpyHostToDevice, stream),
                                    "upload transfer ops");
        !s.ok()) {
      return s;
    }
  }
  return out;
}

absl::Status GatherKv(const DeviceTransferPlan& plan, std::span<const PagedKvLayer> layers,
                      int64_t first_layer, const LaunchOptions& options) {
  return Launch(plan, layers, first_layer, options, /*to_chunk=*/true);
}

absl::Status ScatterKv(const DeviceTransferPlan& plan, std::span<const PagedKvLayer> layers,
                       int64_t first_layer, const LaunchOptions& options) {
  return Launch(plan, layers, first_layer, options, /*to_chunk=*/false);
}

}  // namespace strata::kernels::cuda
