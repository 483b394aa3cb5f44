#include "storage/codec/xkv_codec.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "Eigen/Dense"
#include "core/check.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "fmt/format.h"
#include "kernels/dtype.h"
#include "storage/codec/codec_checks.h"
#include "storage/codec/encoded_chunk.h"

namespace strata::storage {
namespace {

constexpr std::string_view kName = "xkv";
constexpr uint32_t kMaxPlanes = 2;

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Ranks = std::array<uint32_t, kMaxPlanes>;

uint64_t PadTo4(uint64_t bytes) { return (bytes + 3) / 4 * 4; }

// The chunk's dimensions and its grouping of layers.
struct Shape {
  KvDtype dtype = KvDtype::kBfloat16;
  uint32_t tokens = 0;
  uint64_t channels = 0;  // C = num_kv_heads * head_dim
  uint32_t planes = 0;
  uint32_t layers = 0;
  uint32_t group = 0;  // layers per group
  uint64_t plane_bytes = 0;
  uint64_t layer_bytes = 0;

  uint32_t num_groups() const { return (layers + group - 1) / group; }
  uint32_t first_layer(uint32_t g) const { return g * group; }
  uint32_t layers_in(uint32_t g) const { return std::min(group, layers - first_layer(g)); }
  uint64_t max_rank(uint32_t g) const {
    return std::min<uint64_t>(tokens, uint64_t{layers_in(g)} * channels);
  }
  // The first layer's extra: the ranks, and per plane U_r and the row scales.
  uint64_t head_bytes(const Ranks& ranks) const {
    uint64_t bytes = 4 * uint64_t{planes};
    for (uint32_t p = 0; p < planes; ++p)
      bytes += PadTo4(2ull * tokens * ranks[p]) + 4ull * ranks[p];
    return bytes;
  }
  // One layer's columns of W, every plane.
  uint64_t columns_bytes(const Ranks& ranks) const {
    uint64_t bytes = 0;
    for (uint32_t p = 0; p < planes; ++p) bytes += PadTo4(2ull * ranks[p] * channels);
    return bytes;
  }
};

// The energy threshold `params` asks for (0: the default).
float EnergyOf(const CodecParams& params) {
  return params.energy == 0 ? kXkvDefaultEnergy : params.energy;
}

absl::StatusOr<Shape> MakeShape(const KvLayout& layout, uint32_t num_tokens, uint32_t group) {
  if (!kernels::IsFloatDtype(layout.dtype)) {
    return absl::InvalidArgumentError(fmt::format("codec {} reads fp16, bf16 or fp32 KV, not {}",
                                                  kName, DtypeName(layout.dtype)));
  }
  if (num_tokens == 0 || num_tokens > layout.chunk_tokens) {
    return absl::InvalidArgumentError(fmt::format("codec {}: num_tokens {} is outside [1, {}]",
                                                  kName, num_tokens, layout.chunk_tokens));
  }
  if (group == 0 || group > layout.num_layers) {
    return absl::InvalidArgumentError(
        fmt::format("codec {}: group_size (layers per group) {} is outside [1, {}]", kName, group,
                    layout.num_layers));
  }
  return Shape{.dtype = layout.dtype,
               .tokens = num_tokens,
               .channels = uint64_t{layout.num_kv_heads} * layout.head_dim,
               .planes = layout.planes_per_layer(),
               .layers = layout.num_layers,
               .group = group,
               .plane_bytes = layout.plane_token_bytes() * num_tokens,
               .layer_bytes = layout.layer_bytes(num_tokens)};
}

float Fp16ToFloat(const std::byte* p) {
  uint16_t bits = 0;
  std::memcpy(&bits, p, 2);
  return kernels::Fp16BitsToFloat(bits);
}

void PutFp16(std::byte* p, float v) {
  const uint16_t bits = kernels::FloatToFp16Bits(v);
  std::memcpy(p, &bits, 2);
}

// Reads one plane ([tokens][channels] in `dtype` at `in`) into columns [col0, col0 + channels) of
// x.
void LoadPlane(const Shape& s, const std::byte* in, RowMatrix& x, uint64_t col0) {
  kernels::DispatchFloatDtype(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (uint32_t t = 0; t < s.tokens; ++t) {
      for (uint64_t c = 0; c < s.channels; ++c) {
        T value;
        std::memcpy(&value, in + (t * s.channels + c) * sizeof(T), sizeof(T));
        x(t, static_cast<Eigen::Index>(col0 + c)) = kernels::ToFloat(value);
      }
    }
  });
}

void StorePlane(const Shape& s, const RowMatrix& y, std::byte* out) {
  kernels::DispatchFloatDtype(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    const float* values = y.data();
    for (uint64_t i = 0; i < s.tokens * s.channels; ++i) {
      const T value = kernels::FromFloat<T>(values[i]);
      std::memcpy(out + i * sizeof(T), &value, sizeof(T));
    }
  });
}

// One plane of one group, factored: U_r and W (rows divided by their scales), both as their fp16
// bits would decode.
struct Factors {
  uint32_t rank = 0;
  RowMatrix u;  // T x r
  std::vector<float> scales;
  RowMatrix w;  // r x gC, each row divided by its scale
};

Factors Factor(const RowMatrix& x, float energy) {
  const Eigen::Index tokens = x.rows();
  const Eigen::MatrixXd gram = (x * x.transpose()).cast<double>();
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(gram);
  const Eigen::VectorXd& values = solver.eigenvalues();  // ascending
  double total = 0;
  for (Eigen::Index i = 0; i < tokens; ++i) total += std::max(values(i), 0.0);
  Factors f;
  const Eigen::Index max_rank = std::min(tokens, x.cols());
  if (solver.info() == Eigen::Success && total > 0 && std::isfinite(total)) {
    double kept = 0;
    while (f.rank < max_rank && kept < energy * total) {
      kept += std::max(values(tokens - 1 - f.rank), 0.0);
      ++f.rank;
    }
  }
  const auto r = static_cast<Eigen::Index>(f.rank);
  f.u.resize(tokens, r);
  for (Eigen::Index j = 0; j < r; ++j) {
    for (Eigen::Index t = 0; t < tokens; ++t) {
      const auto v = static_cast<float>(solver.eigenvectors()(t, tokens - 1 - j));
      f.u(t, j) = kernels::Fp16BitsToFloat(kernels::FloatToFp16Bits(v));
    }
  }
  f.w = f.u.transpose() * x;  // projected with the U the decoder will use
  f.scales.resize(f.rank);
  for (Eigen::Index i = 0; i < r; ++i) {
    const float scale = f.w.row(i).cwiseAbs().maxCoeff();
    f.scales[i] = scale;
    if (scale > 0 && std::isfinite(scale)) f.w.row(i) /= scale;
  }
  return f;
}

// The sections of one group's layers.
std::vector<std::vector<std::byte>> EncodeGroup(const Shape& s, uint32_t g,
                                                std::span<const std::byte> payload, float energy) {
  const uint32_t first = s.first_layer(g);
  const uint32_t count = s.layers_in(g);
  std::array<Factors, kMaxPlanes> factors;
  Ranks ranks{};
  RowMatrix x(s.tokens, static_cast<Eigen::Index>(count * s.channels));
  for (uint32_t p = 0; p < s.planes; ++p) {
    for (uint32_t k = 0; k < count; ++k) {
      LoadPlane(s, payload.data() + (first + k) * s.layer_bytes + p * s.plane_bytes, x,
                k * s.channels);
    }
    factors[p] = Factor(x, energy);
    ranks[p] = factors[p].rank;
  }
  std::vector<std::vector<std::byte>> sections(count);
  for (uint32_t k = 0; k < count; ++k) {
    std::vector<std::byte>& section = sections[k];
    section.resize((k == 0 ? s.head_bytes(ranks) : 0) + s.columns_bytes(ranks));
    std::byte* out = section.data();
    if (k == 0) {
      std::memcpy(out, ranks.data(), 4ull * s.planes);
      out += 4ull * s.planes;
      for (uint32_t p = 0; p < s.planes; ++p) {
        const Factors& f = factors[p];
        for (uint32_t t = 0; t < s.tokens; ++t) {
          for (uint32_t j = 0; j < f.rank; ++j, out += 2) PutFp16(out, f.u(t, j));
        }
        out += PadTo4(2ull * s.tokens * f.rank) - 2ull * s.tokens * f.rank;
        if (f.rank > 0) std::memcpy(out, f.scales.data(), 4ull * f.rank);
        out += 4ull * f.rank;
      }
    }
    for (uint32_t p = 0; p < s.planes; ++p) {
      const Factors& f = factors[p];
      for (uint32_t i = 0; i < f.rank; ++i) {
        for (uint64_t c = 0; c < s.channels; ++c, out += 2) {
          PutFp16(out, f.w(i, static_cast<Eigen::Index>(k * s.channels + c)));
        }
      }
      out += PadTo4(2ull * f.rank * s.channels) - 2ull * f.rank * s.channels;
    }
    STRATA_CHECK(out == section.data() + section.size());
  }
  return sections;
}

// A group's ranks and where its planes' U and scales start in its first section, checked against
// the section sizes of the group's first layer and of `layer`. kDataLoss for anything this codec
// could not have written.
struct GroupHead {
  Ranks ranks{};
  std::array<const std::byte*, kMaxPlanes> u{};
  std::array<const std::byte*, kMaxPlanes> scales{};
};

absl::StatusOr<GroupHead> ReadGroupHead(const Shape& s, const EncodedChunk& chunk, uint32_t layer) {
  const uint32_t g = layer / s.group;
  const uint32_t first = s.first_layer(g);
  const std::span<const std::byte> head = chunk.section(first);
  GroupHead result;
  if (head.size() < 4ull * s.planes) {
    return absl::DataLossError(fmt::format(
        "encoded chunk layer {}: a {}-byte section without its ranks", first, head.size()));
  }
  std::memcpy(result.ranks.data(), head.data(), 4ull * s.planes);
  for (uint32_t p = 0; p < s.planes; ++p) {
    if (result.ranks[p] > s.max_rank(g)) {
      return absl::DataLossError(
          fmt::format("encoded chunk layers {}..{} plane {}: rank {} exceeds {}", first,
                      first + s.layers_in(g) - 1, p, result.ranks[p], s.max_rank(g)));
    }
  }
  const uint64_t head_bytes = s.head_bytes(result.ranks);
  const uint64_t columns_bytes = s.columns_bytes(result.ranks);
  const uint64_t layer_size = chunk.section(layer).size();
  if (head.size() != head_bytes + columns_bytes ||
      (layer != first && layer_size != columns_bytes)) {
    return absl::DataLossError(fmt::format(
        "encoded chunk layer {}: sections of {} and {} bytes, its group's ranks make {} and {}",
        layer, head.size(), layer_size, head_bytes + columns_bytes, columns_bytes));
  }
  const std::byte* in = head.data() + 4ull * s.planes;
  for (uint32_t p = 0; p < s.planes; ++p) {
    result.u[p] = in;
    in += PadTo4(2ull * s.tokens * result.ranks[p]);
    result.scales[p] = in;
    in += 4ull * result.ranks[p];
  }
  return result;
}

absl::Status DecodeSection(const Shape& s, const EncodedChunk& chunk, uint32_t layer,
                           std::byte* out) {
  const uint32_t first = s.first_layer(layer / s.group);
  STRATA_RETURN_IF_ERROR(chunk.VerifySection(first));
  if (layer != first) STRATA_RETURN_IF_ERROR(chunk.VerifySection(layer));
  STRATA_ASSIGN_OR_RETURN(const GroupHead head, ReadGroupHead(s, chunk, layer));
  const std::byte* columns = chunk.section(layer).data();
  if (layer == first) columns += s.head_bytes(head.ranks);
  RowMatrix u, w, y;
  for (uint32_t p = 0; p < s.planes; ++p) {
    const uint32_t rank = head.ranks[p];
    u.resize(s.tokens, rank);
    for (uint32_t t = 0; t < s.tokens; ++t) {
      for (uint32_t j = 0; j < rank; ++j) u(t, j) = Fp16ToFloat(head.u[p] + 2ull * (t * rank + j));
    }
    w.resize(rank, static_cast<Eigen::Index>(s.channels));
    for (uint32_t i = 0; i < rank; ++i) {
      float scale = 0;
      std::memcpy(&scale, head.scales[p] + 4ull * i, 4);
      for (uint64_t c = 0; c < s.channels; ++c) {
        w(i, static_cast<Eigen::Index>(c)) =
            scale * Fp16ToFloat(columns + 2 * (i * s.channels + c));
      }
    }
    columns += PadTo4(2ull * rank * s.channels);
    if (rank == 0) {
      y.setZero(s.tokens, static_cast<Eigen::Index>(s.channels));
    } else {
      y.noalias() = u * w;
    }
    StorePlane(s, y, out + p * s.plane_bytes);
  }
  return absl::OkStatus();
}

absl::StatusOr<Shape> FrameShape(const KvLayout& layout, const EncodedChunk& chunk) {
  absl::StatusOr<Shape> shape =
      MakeShape(layout, chunk.header().num_tokens, chunk.header().group_size);
  if (!shape.ok()) {
    return absl::DataLossError(fmt::format("encoded chunk parameters do not fit its layout: {}",
                                           shape.status().message()));
  }
  return shape;
}

// Encode's checks of everything but the payload, and the shape they give.
absl::StatusOr<Shape> CheckedShape(const KvLayout& layout, uint32_t num_tokens,
                                   const CodecParams& params) {
  STRATA_RETURN_IF_ERROR(layout.Validate());
  if (params.bits != 0) {
    return absl::InvalidArgumentError(
        fmt::format("codec {} takes no bits (it keeps fp16 factors), got {}", kName, params.bits));
  }
  STRATA_RETURN_IF_ERROR(internal::CheckKeepsTokens(kName, params));
  const float energy = EnergyOf(params);
  if (!(energy > 0 && energy <= 1)) {
    return absl::InvalidArgumentError(
        fmt::format("codec {}: energy must be in (0, 1], got {}", kName, params.energy));
  }
  const uint32_t group = params.group_size == 0
                             ? std::min(kXkvDefaultGroupLayers, layout.num_layers)
                             : params.group_size;
  return MakeShape(layout, num_tokens, group);
}

}  // namespace

std::string_view XkvCodec::error_bound() const {
  return "||X - X^||_F <= (sqrt(1 - energy) + 2e-3) ||X||_F per group of group_size layers and "
         "plane, plus the rounding to the dtype; no per-element bound";
}

absl::Status XkvCodec::CheckParams(const KvLayout& layout, const CodecParams& params) const {
  return CheckedShape(layout, layout.chunk_tokens, params).status();
}

absl::StatusOr<std::vector<std::byte>> XkvCodec::Encode(const KvLayout& layout, uint32_t num_tokens,
                                                        std::span<const std::byte> payload,
                                                        const CodecParams& params) const {
  STRATA_ASSIGN_OR_RETURN(const Shape s, CheckedShape(layout, num_tokens, params));
  const float energy = EnergyOf(params);
  STRATA_RETURN_IF_ERROR(internal::CheckPayload(kName, layout, num_tokens, payload));
  std::vector<std::vector<std::byte>> sections;
  for (uint32_t g = 0; g < s.num_groups(); ++g) {
    for (std::vector<std::byte>& section : EncodeGroup(s, g, payload, energy)) {
      sections.push_back(std::move(section));
    }
  }
  const EncodedChunkHeader header{.codec = id(),
                                  .layout_fingerprint = layout.Fingerprint(),
                                  .num_tokens = num_tokens,
                                  .num_layers = layout.num_layers,
                                  .group_size = s.group,
                                  .decoded_bytes = payload.size()};
  return EncodedChunkWriter::Assemble(header, sections);
}

absl::Status XkvCodec::Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                              std::span<std::byte> out) const {
  STRATA_ASSIGN_OR_RETURN(const EncodedChunk chunk, internal::OpenFrame(id(), layout, encoded));
  STRATA_RETURN_IF_ERROR(internal::CheckOutput(out, chunk.header().decoded_bytes, layout.dtype));
  STRATA_ASSIGN_OR_RETURN(const Shape s, FrameShape(layout, chunk));
  for (uint32_t layer = 0; layer < layout.num_layers; ++layer) {
    STRATA_RETURN_IF_ERROR(DecodeSection(s, chunk, layer, out.data() + layer * s.layer_bytes));
  }
  return absl::OkStatus();
}

absl::Status XkvCodec::DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                                   uint32_t layer, std::span<std::byte> out) const {
  STRATA_ASSIGN_OR_RETURN(const EncodedChunk chunk, internal::OpenFrame(id(), layout, encoded));
  STRATA_RETURN_IF_ERROR(internal::CheckLayer(layout, layer));
  STRATA_RETURN_IF_ERROR(
      internal::CheckOutput(out, layout.layer_bytes(chunk.header().num_tokens), layout.dtype));
  STRATA_ASSIGN_OR_RETURN(const Shape s, FrameShape(layout, chunk));
  return DecodeSection(s, chunk, layer, out.data());
}

absl::StatusOr<std::vector<uint32_t>> XkvCodec::Ranks(const KvLayout& layout,
                                                      std::span<const std::byte> encoded) {
  STRATA_ASSIGN_OR_RETURN(const EncodedChunk chunk,
                          internal::OpenFrame(CodecId::kXkv, layout, encoded));
  STRATA_ASSIGN_OR_RETURN(const Shape s, FrameShape(layout, chunk));
  std::vector<uint32_t> ranks;
  for (uint32_t g = 0; g < s.num_groups(); ++g) {
    STRATA_RETURN_IF_ERROR(chunk.VerifySection(s.first_layer(g)));
    STRATA_ASSIGN_OR_RETURN(const GroupHead head, ReadGroupHead(s, chunk, s.first_layer(g)));
    ranks.insert(ranks.end(), head.ranks.begin(), head.ranks.begin() + s.planes);
  }
  return ranks;
}

}  // namespace strata::storage
