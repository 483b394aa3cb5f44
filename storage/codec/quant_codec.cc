#include "storage/codec/quant_codec.h"

#include <array>
#include <cstring>
#include <numeric>
#include <utility>

#include "core/check.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "kernels/dtype.h"
#include "kernels/quant.h"
#include "kernels/tensor_view.h"
#include "storage/codec/codec_checks.h"

namespace strata::storage {
namespace {

using kernels::QuantAxis;
using kernels::QuantParams;
using kernels::QuantScheme;

// The largest power of two up to a cap that divides the plane's channels (64 for an MLA latent
// of 576). kivi2 caps at KIVI's group of 32. A group's fp16 scale and zero cost 32 / G bits per
// element: kivi4 caps at 64 (3.56x at 16 bits, where 32 gives 3.2x), kivi8 at 128 (1.94x, where
// 32 would give 1.78x).
uint32_t DefaultGroupSize(int bits, int64_t cols) {
  const int64_t cap = bits == 8 ? 128 : bits == 4 ? 64 : 32;
  return static_cast<uint32_t>(std::gcd(cap, cols));
}

// Scales and zeros in fp16: kivi8's always, kivi4's and kivi2's from frame format 2 on
// (encoded_chunk.h); fp32 in format 1 frames.
bool Fp16Params(int bits, uint16_t format_version) { return bits == 8 || format_version >= 2; }

using Plane = QuantLayerRecipe::Plane;

absl::StatusOr<QuantLayerRecipe> Plan(CodecId id, int bits, bool kivi, const KvLayout& layout,
                                      uint32_t num_tokens, uint32_t group_size,
                                      uint16_t format_version) {
  const std::string_view name = CodecIdName(id);
  if (!kernels::IsFloatDtype(layout.dtype)) {
    return absl::InvalidArgumentError(
        fmt::format("codec {} reads fp16, bf16 or fp32 KV, not {}", name, DtypeName(layout.dtype)));
  }
  if (num_tokens == 0 || num_tokens > layout.chunk_tokens) {
    return absl::InvalidArgumentError(fmt::format("codec {}: num_tokens {} is outside [1, {}]",
                                                  name, num_tokens, layout.chunk_tokens));
  }
  QuantLayerRecipe plan;
  plan.dtype = layout.dtype;
  plan.cols = int64_t{layout.num_kv_heads} * layout.head_dim;
  plan.layer_bytes = layout.layer_bytes(num_tokens);
  plan.num_planes = layout.planes_per_layer();
  std::array<int64_t, 2> residual_rows{};
  if (!kivi) {
    if (group_size != 0) {
      return absl::InvalidArgumentError(fmt::format(
          "codec {} takes no group_size (it scales per token and head), got {}", name, group_size));
    }
    for (uint32_t p = 0; p < plan.num_planes; ++p) {
      plan.planes[p].params = {QuantScheme::kSymmetric, QuantAxis::kPerToken, 8,
                               int64_t{layout.head_dim}};
      plan.planes[p].quantized_rows = num_tokens;
    }
  } else {
    plan.group_size = group_size == 0 ? DefaultGroupSize(bits, plan.cols) : group_size;
    const int64_t g = plan.group_size;
    if (plan.cols % g != 0) {
      return absl::InvalidArgumentError(fmt::format(
          "codec {}: group_size {} does not divide the {} channels of a plane (num_kv_heads * "
          "head_dim)",
          name, g, plan.cols));
    }
    // Keys (or an MLA latent) per channel, whole groups of tokens; values per token.
    const bool fp16_params = Fp16Params(bits, format_version);
    Plane& keys = plan.planes[0];
    keys.params = {QuantScheme::kAsymmetric, QuantAxis::kPerChannel, bits, g, fp16_params};
    keys.quantized_rows = num_tokens / g * g;
    residual_rows[0] = num_tokens - keys.quantized_rows;
    plan.planes[1].params = {QuantScheme::kAsymmetric, QuantAxis::kPerToken, bits, g, fp16_params};
    plan.planes[1].quantized_rows = num_tokens;
  }
  const uint64_t token_bytes = layout.plane_token_bytes();
  uint64_t at = 0;
  for (uint32_t p = 0; p < plan.num_planes; ++p) {
    Plane& plane = plan.planes[p];
    // The shape rules (whole groups, whole code words) checked on one group's worth of rows, so
    // that they do not depend on num_tokens.
    const int64_t probe_rows =
        plane.params.axis == QuantAxis::kPerChannel ? plane.params.group_size : 1;
    STRATA_RETURN_IF_ERROR(
        Annotate(kernels::QuantizedSizesFor(plane.params, probe_rows, plan.cols).status(),
                 fmt::format("codec {} on layout {}", name, layout.DebugString())));
    kernels::QuantizedSizes sizes;
    if (plane.quantized_rows > 0) {
      STRATA_ASSIGN_OR_RETURN(
          sizes, kernels::QuantizedSizesFor(plane.params, plane.quantized_rows, plan.cols));
    }
    plane.codes_offset = at;
    plane.code_words = static_cast<uint64_t>(sizes.code_words);
    at += plane.code_words * 4;
    plane.num_groups = static_cast<uint64_t>(sizes.num_groups);
    plane.scales_offset = at;
    at += plane.num_groups * plane.param_bytes();
    plane.zeros_offset = at;
    if (plane.params.scheme == QuantScheme::kAsymmetric) {
      at += plane.num_groups * plane.param_bytes();
    }
    plane.residual_offset = at;
    plane.residual_bytes = token_bytes * static_cast<uint64_t>(residual_rows[p]);
    at += plane.residual_bytes;
    plane.out_bytes = token_bytes * num_tokens;
    plane.out_offset = p * plane.out_bytes;
  }
  plan.section_bytes = at;
  return plan;
}

// The fp32 copies of one plane's fp16 scales and zeros: one buffer per thread, reused by every
// layer and plane, so a decode allocates nothing once warm.
std::vector<float>& ThreadParamScratch() {
  thread_local std::vector<float> scratch;
  return scratch;
}

// A plane's scales and zeros as fp32 for the kernels: the section's own where it holds fp32
// (its parts are 4-byte aligned), else (fp16) copies in the thread's scratch, which Store writes
// back. At most one lives at a time on a thread (they share that scratch).
template <class Byte>
class PlaneParams {
 public:
  using Float = std::conditional_t<std::is_const_v<Byte>, const float, float>;

  PlaneParams(const Plane& plane, Byte* section)
      : fp16_(plane.params.fp16_params),
        groups_(plane.num_groups),
        zero_count_(plane.params.scheme == QuantScheme::kAsymmetric ? groups_ : 0),
        scales_at_(section + plane.scales_offset),
        owned_(ThreadParamScratch()) {
    if (!fp16_) {
      scales_ = {reinterpret_cast<Float*>(scales_at_), groups_};
      zeros_ = {reinterpret_cast<Float*>(section + plane.zeros_offset), zero_count_};
      return;
    }
    owned_.resize(groups_ + zero_count_);
    for (size_t i = 0; i < owned_.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, scales_at_ + 2 * i, 2);  // the zeros follow the scales
      owned_[i] = kernels::Fp16BitsToFloat(bits);
    }
    scales_ = std::span<Float>(owned_).first(groups_);
    zeros_ = std::span<Float>(owned_).subspan(groups_);
  }

  std::span<Float> scales() const { return scales_; }
  std::span<Float> zeros() const { return zeros_; }

  // Writes fp16 values back into the section (exact: the kernel made them fp16 values).
  void Store() const {
    if (!fp16_) return;
    for (size_t i = 0; i < owned_.size(); ++i) {
      const uint16_t bits = kernels::FloatToFp16Bits(owned_[i]);
      std::memcpy(scales_at_ + 2 * i, &bits, 2);
    }
  }

 private:
  bool fp16_;
  size_t groups_;
  size_t zero_count_;
  Byte* scales_at_;
  std::vector<float>& owned_;
  std::span<Float> scales_;
  std::span<Float> zeros_;
};

absl::Status EncodeLayer(const QuantLayerRecipe& plan, const std::byte* in,
                         std::span<std::byte> section) {
  std::byte* base = section.data();
  for (uint32_t p = 0; p < plan.num_planes; ++p) {
    const Plane& plane = plan.planes[p];
    const std::byte* plane_in = in + plane.out_offset;
    if (plane.quantized_rows > 0) {
      PlaneParams<std::byte> params(plane, base);
      STRATA_RETURN_IF_ERROR(kernels::Quantize(
          plane.params,
          kernels::ConstMatrixView::Dense(plane_in, plan.dtype, plane.quantized_rows, plan.cols),
          std::span(reinterpret_cast<uint32_t*>(base + plane.codes_offset), plane.code_words),
          params.scales(), params.zeros()));
      params.Store();
    }
    std::memcpy(base + plane.residual_offset, plane_in + plane.out_bytes - plane.residual_bytes,
                plane.residual_bytes);
  }
  return absl::OkStatus();
}

absl::Status DecodeLayerSection(const QuantLayerRecipe& plan, std::span<const std::byte> section,
                                std::byte* out) {
  const std::byte* base = section.data();
  for (uint32_t p = 0; p < plan.num_planes; ++p) {
    const Plane& plane = plan.planes[p];
    std::byte* plane_out = out + plane.out_offset;
    if (plane.quantized_rows > 0) {
      const PlaneParams<const std::byte> params(plane, base);
      STRATA_RETURN_IF_ERROR(kernels::Dequantize(
          plane.params,
          std::span(reinterpret_cast<const uint32_t*>(base + plane.codes_offset), plane.code_words),
          params.scales(), params.zeros(),
          kernels::MatrixView::Dense(plane_out, plan.dtype, plane.quantized_rows, plan.cols)));
    }
    std::memcpy(plane_out + plane.out_bytes - plane.residual_bytes, base + plane.residual_offset,
                plane.residual_bytes);
  }
  return absl::OkStatus();
}

// The recipe of a parsed frame of this codec for `layout` (EncodedChunk::CheckWrittenBy passed):
// every section of the size its parameters make.
absl::StatusOr<QuantLayerRecipe> FrameRecipe(CodecId id, int bits, bool kivi,
                                             const KvLayout& layout, const EncodedChunk& chunk) {
  const EncodedChunkHeader& header = chunk.header();
  absl::StatusOr<QuantLayerRecipe> plan =
      Plan(id, bits, kivi, layout, header.num_tokens, header.group_size, header.format_version);
  if (!plan.ok()) {
    return absl::DataLossError(
        fmt::format("encoded chunk parameters do not fit its layout: {}", plan.status().message()));
  }
  for (uint32_t layer = 0; layer < header.num_layers; ++layer) {
    if (chunk.section_bytes(layer) != plan->section_bytes) {
      return absl::DataLossError(
          fmt::format("encoded chunk layer {} holds {} bytes, its parameters make {}", layer,
                      chunk.section_bytes(layer), plan->section_bytes));
    }
  }
  return plan;
}

// A frame of this codec for `layout`, parsed and checked, with its recipe.
struct Opened {
  EncodedChunk chunk;
  QuantLayerRecipe plan;
};

absl::StatusOr<Opened> Open(CodecId id, int bits, bool kivi, const KvLayout& layout,
                            std::span<const std::byte> encoded) {
  STRATA_ASSIGN_OR_RETURN(EncodedChunk chunk, internal::OpenFrame(id, layout, encoded));
  STRATA_ASSIGN_OR_RETURN(QuantLayerRecipe plan, FrameRecipe(id, bits, kivi, layout, chunk));
  return Opened{std::move(chunk), plan};
}

// Encode's checks of everything but the payload, and the plan they give.
absl::StatusOr<QuantLayerRecipe> CheckedPlan(CodecId id, int bits, bool kivi,
                                             const KvLayout& layout, uint32_t num_tokens,
                                             const CodecParams& params) {
  STRATA_RETURN_IF_ERROR(layout.Validate());
  if (params.bits != 0) {
    return absl::InvalidArgumentError(fmt::format("codec {} takes no bits (it has {}), got {}",
                                                  CodecIdName(id), bits, params.bits));
  }
  STRATA_RETURN_IF_ERROR(internal::CheckNoEnergy(CodecIdName(id), params));
  STRATA_RETURN_IF_ERROR(internal::CheckKeepsTokens(CodecIdName(id), params));
  return Plan(id, bits, kivi, layout, num_tokens, params.group_size, kEncodedFormatVersion);
}

}  // namespace

QuantCodec::QuantCodec(CodecId id)
    : id_(id),
      bits_(id == CodecId::kKivi2   ? 2
            : id == CodecId::kKivi4 ? 4
                                    : 8),
      kivi_(id != CodecId::kInt8) {
  STRATA_CHECK(id == CodecId::kInt8 || id == CodecId::kKivi8 || id == CodecId::kKivi4 ||
               id == CodecId::kKivi2);
}

std::string_view QuantCodec::error_bound() const {
  switch (id_) {
    case CodecId::kInt8:
      return "|x - x^| <= s/2 (1 + 1e-3) + ulp(x^)/2 in the dtype; s = max|x| / 127 per token "
             "and head";
    case CodecId::kKivi8:
      return "|x - x^| <= s/2 (1 + 1e-3) + ulp(x^)/2 in the dtype; s = (max - z) / 255 rounded "
             "up to fp16, z = min rounded down to fp16, per group (keys: group_size tokens of a "
             "channel; values: group_size channels of a token); residual keys exact";
    case CodecId::kKivi4:
      return "|x - x^| <= s/2 (1 + 1e-3) + ulp(x^)/2 in the dtype; s = (max - z) / 15 rounded "
             "up to fp16, z = min rounded down to fp16, per group (keys: group_size tokens of a "
             "channel; values: group_size channels of a token); residual keys exact";
    case CodecId::kKivi2:
      return "|x - x^| <= s/2 (1 + 1e-3) + ulp(x^)/2 in the dtype; s = (max - z) / 3 rounded "
             "up to fp16, z = min rounded down to fp16, per group (keys: group_size tokens of a "
             "channel; values: group_size channels of a token); residual keys exact";
    case CodecId::kCacheGen:
    case CodecId::kXkv:
    case CodecId::kDropSinkRecent:
    case CodecId::kDropH2o:
      break;  // not a QuantCodec (the constructor checks)
  }
  return "";
}

absl::Status QuantCodec::CheckParams(const KvLayout& layout, const CodecParams& params) const {
  return CheckedPlan(id_, bits_, kivi_, layout, layout.chunk_tokens, params).status();
}

absl::StatusOr<std::vector<std::byte>> QuantCodec::Encode(const KvLayout& layout,
                                                          uint32_t num_tokens,
                                                          std::span<const std::byte> payload,
                                                          const CodecParams& params) const {
  STRATA_ASSIGN_OR_RETURN(const QuantLayerRecipe plan,
                          CheckedPlan(id_, bits_, kivi_, layout, num_tokens, params));
  STRATA_RETURN_IF_ERROR(internal::CheckPayload(name(), layout, num_tokens, payload));
  const EncodedChunkHeader header{.codec = id_,
                                  .layout_fingerprint = layout.Fingerprint(),
                                  .num_tokens = num_tokens,
                                  .num_layers = layout.num_layers,
                                  .group_size = plan.group_size,
                                  .decoded_bytes = payload.size()};
  const std::vector<uint64_t> section_bytes(layout.num_layers, plan.section_bytes);
  EncodedChunkWriter writer(header, section_bytes);
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    STRATA_RETURN_IF_ERROR(
        EncodeLayer(plan, payload.data() + layer * plan.layer_bytes, writer.section(layer)));
  }
  return std::move(writer).Finish();
}

absl::Status QuantCodec::Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                                std::span<std::byte> out) const {
  STRATA_ASSIGN_OR_RETURN(const Opened opened, Open(id_, bits_, kivi_, layout, encoded));
  STRATA_RETURN_IF_ERROR(
      internal::CheckOutput(out, opened.chunk.header().decoded_bytes, layout.dtype));
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    STRATA_RETURN_IF_ERROR(opened.chunk.VerifySection(layer));
    STRATA_RETURN_IF_ERROR(DecodeLayerSection(opened.plan, opened.chunk.section(layer),
                                              out.data() + layer * opened.plan.layer_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<QuantLayerRecipe> QuantCodec::Recipe(const KvLayout& layout,
                                                    const EncodedChunk& frame) const {
  STRATA_RETURN_IF_ERROR(layout.Validate());
  STRATA_RETURN_IF_ERROR(frame.CheckWrittenBy(id_, layout));
  return FrameRecipe(id_, bits_, kivi_, layout, frame);
}

absl::Status QuantCodec::DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                                     uint32_t layer, std::span<std::byte> out) const {
  STRATA_ASSIGN_OR_RETURN(const Opened opened, Open(id_, bits_, kivi_, layout, encoded));
  STRATA_RETURN_IF_ERROR(internal::CheckLayer(layout, layer));
  STRATA_RETURN_IF_ERROR(internal::CheckOutput(out, opened.plan.layer_bytes, layout.dtype));
  STRATA_RETURN_IF_ERROR(opened.chunk.VerifySection(layer));
  return DecodeLayerSection(opened.plan, opened.chunk.section(layer), out.data());
}

}  // namespace strata::storage
