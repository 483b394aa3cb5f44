#include "storage/codec/cachegen_codec.h"

#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/check.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "kernels/dtype.h"
#include "kernels/quant.h"
#include "kernels/tensor_view.h"
#include "storage/codec/code_stream.h"
#include "storage/codec/codec_checks.h"
#include "storage/codec/encoded_chunk.h"

namespace strata::storage {
namespace {

using kernels::QuantAxis;
using kernels::QuantParams;
using kernels::QuantScheme;

constexpr std::string_view kName = "cachegen";

uint64_t PadTo4(uint64_t bytes) { return (bytes + 3) / 4 * 4; }

// The code of the value 0 in each group, the code stream's prediction (code_stream.h): rint(-zero /
// scale) when it is a code, else 0 (a constant or non-finite group). Encoder and decoder compute it
// from the same fp32 scales and zeros, so it needs no storage.
void ZeroCodes(int bits, std::span<const float> scales, std::span<const float> zeros,
               std::vector<uint8_t>& offsets) {
  const auto max_code = static_cast<float>((1 << bits) - 1);
  offsets.resize(scales.size());
  for (size_t i = 0; i < scales.size(); ++i) {
    const float code = scales[i] > 0 ? -zeros[i] / scales[i] : -1.0f;
    offsets[i] = code >= 0 && code <= max_code ? static_cast<uint8_t>(std::rint(code)) : 0;
  }
}

// How every plane of a layer is quantized, and the sizes that follow from it.
struct Plan {
  KvDtype dtype = KvDtype::kBfloat16;
  int bits = 0;
  uint32_t group_size = 0;
  int64_t rows = 0;  // num_tokens
  int64_t cols = 0;  // num_kv_heads * head_dim
  uint32_t num_planes = 0;
  uint64_t plane_bytes = 0;  // raw bytes of one plane
  uint64_t layer_bytes = 0;  // raw bytes of one layer
  QuantParams params;
  kernels::QuantizedSizes sizes;

  uint64_t num_codes() const { return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols); }
  uint64_t scale_bytes() const { return static_cast<uint64_t>(sizes.num_groups) * 4; }
  // The fixed head of a section: bits and one stream size per plane.
  uint64_t head_bytes() const { return 4 + 4 * uint64_t{num_planes}; }
  CodeShape code_shape() const { return {bits, rows, cols, group_size}; }
};

absl::StatusOr<Plan> MakePlan(const KvLayout& layout, uint32_t num_tokens, uint32_t bits,
                              uint32_t group_size) {
  if (!kernels::IsFloatDtype(layout.dtype)) {
    return absl::InvalidArgumentError(fmt::format("codec {} reads fp16, bf16 or fp32 KV, not {}",
                                                  kName, DtypeName(layout.dtype)));
  }
  if (num_tokens == 0 || num_tokens > layout.chunk_tokens) {
    return absl::InvalidArgumentError(fmt::format("codec {}: num_tokens {} is outside [1, {}]",
                                                  kName, num_tokens, layout.chunk_tokens));
  }
  if (bits != 2 && bits != 4 && bits != 8) {
    return absl::InvalidArgumentError(
        fmt::format("codec {}: bits must be 2, 4 or 8, got {}", kName, bits));
  }
  Plan plan;
  plan.dtype = layout.dtype;
  plan.bits = static_cast<int>(bits);
  plan.rows = num_tokens;
  plan.cols = int64_t{layout.num_kv_heads} * layout.head_dim;
  plan.group_size = group_size == 0 ? static_cast<uint32_t>(plan.cols) : group_size;
  plan.num_planes = layout.planes_per_layer();
  plan.plane_bytes = layout.plane_token_bytes() * num_tokens;
  plan.layer_bytes = layout.layer_bytes(num_tokens);
  if (plan.cols % plan.group_size != 0) {
    return absl::InvalidArgumentError(fmt::format(
        "codec {}: group_size {} does not divide the {} channels of a plane (num_kv_heads * "
        "head_dim)",
        kName, plan.group_size, plan.cols));
  }
  plan.params = {QuantScheme::kAsymmetric, QuantAxis::kPerToken, plan.bits,
                 int64_t{plan.group_size}};
  const absl::StatusOr<kernels::QuantizedSizes> sizes =
      kernels::QuantizedSizesFor(plan.params, plan.rows, plan.cols);
  if (!sizes.ok()) {
    return Annotate(sizes.status(),
                    fmt::format("codec {} on layout {}", kName, layout.DebugString()));
  }
  plan.sizes = *sizes;
  return plan;
}

// One plane's quantizer output.
struct QuantizedPlane {
  std::vector<uint32_t> words;
  std::vector<float> scales;
  std::vector<float> zeros;
};

template <class T>
void Put(std::byte*& out, std::span<const T> values) {
  std::memcpy(out, values.data(), values.size_bytes());
  out += values.size_bytes();
}

// Quantizes and entropy-codes one layer into its section.
absl::StatusOr<std::vector<std::byte>> EncodeLayer(const Plan& plan, const std::byte* in,
                                                   CodeStreamEncoder& encoder) {
  std::vector<uint16_t> codes(plan.num_codes());
  std::vector<uint8_t> offsets;
  std::array<QuantizedPlane, 2> planes;
  std::array<std::vector<std::byte>, 2> streams;
  uint64_t section_bytes = plan.head_bytes();
  for (uint32_t p = 0; p < plan.num_planes; ++p) {
    QuantizedPlane& q = planes[p];
    q.words.resize(static_cast<size_t>(plan.sizes.code_words));
    q.scales.resize(static_cast<size_t>(plan.sizes.num_groups));
    q.zeros.resize(static_cast<size_t>(plan.sizes.num_groups));
    STRATA_RETURN_IF_ERROR(
        kernels::Quantize(plan.params,
                          kernels::ConstMatrixView::Dense(in + p * plan.plane_bytes, plan.dtype,
                                                          plan.rows, plan.cols),
                          q.words, q.scales, q.zeros));
    STRATA_RETURN_IF_ERROR(kernels::UnpackCodes(plan.bits, q.words, codes));
    ZeroCodes(plan.bits, q.scales, q.zeros, offsets);
    STRATA_ASSIGN_OR_RETURN(streams[p], encoder.Encode(plan.code_shape(), codes, offsets));
    section_bytes += 2 * plan.scale_bytes() + PadTo4(streams[p].size());
  }
  std::vector<std::byte> section(section_bytes);
  std::byte* out = section.data();
  const uint32_t bits = static_cast<uint32_t>(plan.bits);
  Put(out, std::span(&bits, 1));
  for (uint32_t p = 0; p < plan.num_planes; ++p) {
    const auto size = static_cast<uint32_t>(streams[p].size());
    Put(out, std::span(&size, 1));
  }
  for (uint32_t p = 0; p < plan.num_planes; ++p) {
    Put(out, std::span<const float>(planes[p].scales));
    Put(out, std::span<const float>(planes[p].zeros));
    Put(out, std::span<const std::byte>(streams[p]));
    out += PadTo4(streams[p].size()) - streams[p].size();  // zero-filled
  }
  STRATA_CHECK(out == section.data() + section.size());
  return section;
}

// Checks a section's head and sizes against the frame's group size and the layout, and returns its
// plan and its planes' stream sizes. kDataLoss for anything this codec could not have written.
struct SectionPlan {
  Plan plan;
  std::array<uint32_t, 2> stream_bytes{};
};

absl::StatusOr<SectionPlan> ReadSectionPlan(const KvLayout& layout, uint32_t num_tokens,
                                            uint32_t group_size, uint32_t layer,
                                            std::span<const std::byte> section) {
  const uint64_t head_bytes = 4 + 4 * uint64_t{layout.planes_per_layer()};
  if (section.size() < head_bytes || !internal::Aligned(section.data(), 4)) {
    return absl::DataLossError(
        fmt::format("encoded chunk layer {}: a {}-byte section, unaligned or without its head",
                    layer, section.size()));
  }
  uint32_t bits = 0;
  std::memcpy(&bits, section.data(), 4);
  absl::StatusOr<Plan> plan = MakePlan(layout, num_tokens, bits, group_size);
  if (!plan.ok()) {
    return absl::DataLossError(
        fmt::format("encoded chunk layer {} parameters do not fit its layout: {}", layer,
                    plan.status().message()));
  }
  SectionPlan result{*std::move(plan)};
  uint64_t expected = head_bytes;
  for (uint32_t p = 0; p < result.plan.num_planes; ++p) {
    std::memcpy(&result.stream_bytes[p], section.data() + 4 + 4 * p, 4);
    expected += 2 * result.plan.scale_bytes() + PadTo4(result.stream_bytes[p]);
  }
  if (expected != section.size()) {
    return absl::DataLossError(
        fmt::format("encoded chunk layer {} holds {} bytes, its head makes {}", layer,
                    section.size(), expected));
  }
  return result;
}

// Scratch for decoding one layer after another.
struct DecodeScratch {
  CodeStreamDecoder decoder;
  std::vector<uint16_t> codes;
  std::vector<uint32_t> words;
  std::vector<uint8_t> offsets;
};

absl::Status DecodeSection(const KvLayout& layout, const EncodedChunk& chunk, uint32_t layer,
                           std::byte* out, DecodeScratch& scratch) {
  STRATA_RETURN_IF_ERROR(chunk.VerifySection(layer));
  const EncodedChunkHeader& header = chunk.header();
  const std::span<const std::byte> section = chunk.section(layer);
  STRATA_ASSIGN_OR_RETURN(const SectionPlan sp, ReadSectionPlan(layout, header.num_tokens,
                                                                header.group_size, layer, section));
  const Plan& plan = sp.plan;
  scratch.codes.resize(plan.num_codes());
  scratch.words.resize(static_cast<size_t>(plan.sizes.code_words));
  const std::byte* in = section.data() + plan.head_bytes();
  const auto groups = static_cast<size_t>(plan.sizes.num_groups);
  for (uint32_t p = 0; p < plan.num_planes; ++p) {
    const std::span scales(reinterpret_cast<const float*>(in), groups);
    const std::span zeros(reinterpret_cast<const float*>(in + plan.scale_bytes()), groups);
    in += 2 * plan.scale_bytes();
    ZeroCodes(plan.bits, scales, zeros, scratch.offsets);
    STRATA_RETURN_IF_ERROR(
        Annotate(scratch.decoder.Decode(plan.code_shape(), std::span(in, sp.stream_bytes[p]),
                                        scratch.offsets, scratch.codes),
                 fmt::format("encoded chunk layer {} plane {}", layer, p)));
    in += PadTo4(sp.stream_bytes[p]);
    STRATA_RETURN_IF_ERROR(kernels::PackCodes(plan.bits, scratch.codes, scratch.words));
    STRATA_RETURN_IF_ERROR(kernels::Dequantize(
        plan.params, scratch.words, scales, zeros,
        kernels::MatrixView::Dense(out + p * plan.plane_bytes, plan.dtype, plan.rows, plan.cols)));
  }
  return absl::OkStatus();
}

uint32_t BitsOf(const CodecParams& params) {
  return params.bits == 0 ? kCacheGenDefaultBits : params.bits;
}

// Encode's checks of everything but the payload, and the plan they give.
absl::StatusOr<Plan> CheckedPlan(const KvLayout& layout, uint32_t num_tokens,
                                 const CodecParams& params) {
  STRATA_RETURN_IF_ERROR(layout.Validate());
  STRATA_RETURN_IF_ERROR(internal::CheckNoEnergy(kName, params));
  STRATA_RETURN_IF_ERROR(internal::CheckKeepsTokens(kName, params));
  return MakePlan(layout, num_tokens, BitsOf(params), params.group_size);
}

}  // namespace

std::string_view CacheGenCodec::error_bound() const {
  return "|x - x^| <= s/2 (1 + 1e-3) + ulp(x^)/2 in the dtype; s = (max - min) / (2^bits - 1) "
         "per token over group_size channels of a plane (default: all of them); the entropy "
         "stage is lossless";
}

absl::Status CacheGenCodec::CheckParams(const KvLayout& layout, const CodecParams& params) const {
  return CheckedPlan(layout, layout.chunk_tokens, params).status();
}

absl::StatusOr<std::vector<std::byte>> CacheGenCodec::Encode(const KvLayout& layout,
                                                             uint32_t num_tokens,
                                                             std::span<const std::byte> payload,
                                                             const CodecParams& params) const {
  STRATA_ASSIGN_OR_RETURN(const Plan plan, CheckedPlan(layout, num_tokens, params));
  STRATA_RETURN_IF_ERROR(internal::CheckPayload(kName, layout, num_tokens, payload));
  CodeStreamEncoder encoder;
  std::vector<std::vector<std::byte>> sections;
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    STRATA_ASSIGN_OR_RETURN(std::vector<std::byte> section,
                            EncodeLayer(plan, payload.data() + layer * plan.layer_bytes, encoder));
    sections.push_back(std::move(section));
  }
  const EncodedChunkHeader header{.codec = id(),
                                  .layout_fingerprint = layout.Fingerprint(),
                                  .num_tokens = num_tokens,
                                  .num_layers = layout.num_layers,
                                  .group_size = plan.group_size,
                                  .decoded_bytes = payload.size()};
  return EncodedChunkWriter::Assemble(header, sections);
}

absl::Status CacheGenCodec::Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                                   std::span<std::byte> out) const {
  STRATA_ASSIGN_OR_RETURN(const EncodedChunk chunk, internal::OpenFrame(id(), layout, encoded));
  STRATA_RETURN_IF_ERROR(internal::CheckOutput(out, chunk.header().decoded_bytes, layout.dtype));
  const uint64_t layer_bytes = layout.layer_bytes(chunk.header().num_tokens);
  DecodeScratch scratch;
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    STRATA_RETURN_IF_ERROR(
        DecodeSection(layout, chunk, layer, out.data() + layer * layer_bytes, scratch));
  }
  return absl::OkStatus();
}

absl::Status CacheGenCodec::DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                                        uint32_t layer, std::span<std::byte> out) const {
  STRATA_ASSIGN_OR_RETURN(const EncodedChunk chunk, internal::OpenFrame(id(), layout, encoded));
  STRATA_RETURN_IF_ERROR(internal::CheckLayer(layout, layer));
  STRATA_RETURN_IF_ERROR(
      internal::CheckOutput(out, layout.layer_bytes(chunk.header().num_tokens), layout.dtype));
  DecodeScratch scratch;
  return DecodeSection(layout, chunk, layer, out.data(), scratch);
}

absl::StatusOr<uint64_t> CacheGenCodec::QuantizedOnlyBytes(const KvLayout& layout,
                                                           uint32_t num_tokens,
                                                           const CodecParams& params) {
  STRATA_RETURN_IF_ERROR(layout.Validate());
  STRATA_ASSIGN_OR_RETURN(const Plan plan,
                          MakePlan(layout, num_tokens, BitsOf(params), params.group_size));
  const uint64_t plane = static_cast<uint64_t>(plan.sizes.code_words) * 4 + 2 * plan.scale_bytes();
  return EncodedFrameOverheadBytes(layout.num_layers) +
         uint64_t{layout.num_layers} * plan.num_planes * plane;
}

}  // namespace strata::storage
