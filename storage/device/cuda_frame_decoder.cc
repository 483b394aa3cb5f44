#include "storage/device/cuda_frame_decoder.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/quant.h"
#include "kernels/tensor_view.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/encoded_chunk.h"

namespace strata::storage {

std::vector<const Codec*> CudaDecodableCodecs() {
  std::vector<const Codec*> codecs;
  for (const Codec* codec : CodecRegistry::All()) {
    if (dynamic_cast<const QuantCodec*>(codec) != nullptr) codecs.push_back(codec);
  }
  return codecs;
}

CudaFrameDecoder::~CudaFrameDecoder() {
  if (scratch_ != nullptr) cudaFree(scratch_);
}

absl::Status CudaFrameDecoder::Enqueue(std::span<const DecodeLayerOp> ops) {
  for (const DecodeLayerOp& op : ops) {
    if (!codecs_.Contains(static_cast<uint32_t>(op.codec->id()))) {
      return absl::UnimplementedError(
          fmt::format("cuda stream: no kernels decode codec {}", op.codec->name()));
    }
  }
  std::vector<Planned> planned;
  planned.reserve(ops.size());
  uint64_t scratch_floats = 0;
  for (const DecodeLayerOp& op : ops) {
    absl::StatusOr<Planned> plan = Plan(op);
    if (!plan.ok()) {
      *op.failure = plan.status();
      continue;
    }
    for (uint32_t p = 0; p < plan->recipe.num_planes; ++p) {
      const QuantLayerRecipe::Plane& plane = plan->recipe.planes[p];
      if (plane.params.fp16_params && plane.quantized_rows > 0) {
        scratch_floats = std::max(scratch_floats, 2 * plane.num_groups);
      }
    }
    planned.push_back(*std::move(plan));
  }
  // What fails from here puts the stream in error: the ops not launched say so in their slots.
  const auto fail_from = [&planned](size_t first, const absl::Status& status) {
    for (size_t i = first; i < planned.size(); ++i) *planned[i].op->failure = status;
    return status;
  };
  if (absl::Status reserved = ReserveScratch(scratch_floats); !reserved.ok()) {
    return fail_from(0, reserved);
  }
  for (size_t i = 0; i < planned.size(); ++i) {
    if (absl::Status launched = Launch(planned[i]); !launched.ok()) return fail_from(i, launched);
  }
  return absl::OkStatus();
}

absl::StatusOr<CudaFrameDecoder::Planned> CudaFrameDecoder::Plan(const DecodeLayerOp& op) {
  const auto* quant = dynamic_cast<const QuantCodec*>(op.codec);
  if (quant == nullptr) {
    return absl::InvalidArgumentError(
        fmt::format("cuda stream: codec {} is not a quantizing codec", op.codec->name()));
  }
  if (reinterpret_cast<uintptr_t>(op.frame) % 4 != 0) {
    return absl::InvalidArgumentError("cuda stream: a frame to decode must be 4-byte aligned");
  }
  STRATA_ASSIGN_OR_RETURN(const EncodedChunk head,
                          EncodedChunk::ParseHead(op.frame_head, op.frame_bytes));
  STRATA_ASSIGN_OR_RETURN(QuantLayerRecipe recipe, quant->Recipe(*op.layout, head));
  if (op.out_bytes != recipe.layer_bytes) {
    return absl::InvalidArgumentError(
        fmt::format("cuda stream: decode output holds {} bytes, the frame's layer decodes to {}",
                    op.out_bytes, recipe.layer_bytes));
  }
  return Planned{&op, recipe, head.section_offset(op.layer)};
}

absl::Status CudaFrameDecoder::Launch(const Planned& planned) {
  const DecodeLayerOp& op = *planned.op;
  const QuantLayerRecipe& recipe = planned.recipe;
  const std::byte* section = op.frame + planned.section_offset;
  const kernels::cuda::LaunchOptions launch{.stream = stream_};
  for (uint32_t p = 0; p < recipe.num_planes; ++p) {
    const QuantLayerRecipe::Plane& plane = recipe.planes[p];
    std::byte* plane_out = op.out + plane.out_offset;
    if (plane.quantized_rows > 0) {
      const bool asymmetric = plane.params.scheme == kernels::QuantScheme::kAsymmetric;
      const uint64_t values = (asymmetric ? 2 : 1) * plane.num_groups;  // zeros follow scales
      const auto* params = reinterpret_cast<const float*>(section + plane.scales_offset);
      if (plane.params.fp16_params) {
        STRATA_RETURN_IF_ERROR(kernels::cuda::CastToFloat(section + plane.scales_offset,
                                                          KvDtype::kFloat16, scratch_,
                                                          static_cast<int64_t>(values), launch));
        params = scratch_;
      }
      STRATA_RETURN_IF_ERROR(kernels::cuda::Dequantize(
          plane.params,
          std::span(reinterpret_cast<const uint32_t*>(section + plane.codes_offset),
                    plane.code_words),
          std::span(params, plane.num_groups),
          std::span(params + plane.num_groups, asymmetric ? plane.num_groups : 0),
          kernels::MatrixView::Dense(plane_out, recipe.dtype, plane.quantized_rows, recipe.cols),
          launch));
    }
    if (plane.residual_bytes > 0) {
      STRATA_RETURN_IF_ERROR(kernels::cuda::CudaStatus(
          cudaMemcpyAsync(plane_out + plane.out_bytes - plane.residual_bytes,
                          section + plane.residual_offset, plane.residual_bytes,
                          cudaMemcpyDeviceToDevice, stream_),
          "copy residual tokens"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaFrameDecoder::ReserveScratch(uint64_t floats) {
  if (floats <= scratch_floats_) return absl::OkStatus();
  if (scratch_ != nullptr) {
    // Decodes enqueued earlier may still read it.
    STRATA_RETURN_IF_ERROR(
        kernels::cuda::CudaStatus(cudaStreamSynchronize(stream_), "wait to grow decode scratch"));
    cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_floats_ = 0;
  }
  void* scratch = nullptr;
  STRATA_RETURN_IF_ERROR(
      kernels::cuda::CudaStatus(cudaMalloc(&scratch, floats * sizeof(float)), "decode scratch"));
  scratch_ = static_cast<float*>(scratch);
  scratch_floats_ = floats;
  return absl::OkStatus();
}

}  // namespace strata::storage
