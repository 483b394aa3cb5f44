// XkvCodec: the `xkv` codec (ALGORITHMS.md section 5c, xKV): a low-rank factorisation of each plane
// over a group of consecutive layers, whose rank keeps a chosen share of the group's energy.
//
// Each plane of a layer (K and V for MHA, the latent for MLA) is a matrix [T, C], T = num_tokens,
// C = num_kv_heads * head_dim. Layers are taken in groups of G consecutive ones (CodecParams::
// group_size, default 4, at most num_layers; the last group may be shorter); for a group of g
// layers and a plane, X = [X_a | ... | X_a+g-1] in R^{T x gC}. With X X^T = U diag(l) U^T
// (eigenvalues l descending: the squared singular values of X, by Eigen's self-adjoint solver in
// fp64 over an fp32 Gram matrix), the rank r is the smallest that keeps
//     sum_{i<r} l_i >= energy * sum_i l_i,      energy = CodecParams::energy (default 0.99),
// and X^ = U_r W with W = U_r^T X (= Sigma_r V_r^T): the truncated SVD, which by Eckart-Young
// leaves ||X - X^||_F / ||X||_F = sqrt(sum_{i>=r} l_i / sum_i l_i) <= sqrt(1 - energy).
// Rather than the pair A = U_r Sigma_r, B = V_r^T of xKV's code this stores U_r (entries in
// [-1, 1]) and W with one fp32 scale per row (its largest magnitude), both in fp16. A zero plane
// has rank 0 and decodes to zeros.
//
// Error bound, per group of layers and plane, for finite inputs:
//     ||X - X^||_F <= (sqrt(1 - energy) + 2e-3) ||X||_F + the rounding of X^ to the layout's dtype,
// where 2e-3 covers the fp16 storage of the factors (codec_test measures it). There is no
// per-element bound: the error spreads over the group. The codec keeps what it is given: on a
// rope_applied chunk it factors post-RoPE keys, which need a higher rank than pre-RoPE ones (xKV
// factors pre-RoPE keys: a nope layout's).
//
// Ratio: raw 2 T g C bytes (16-bit dtypes) against about r (2 T + 2 g C + 4) per plane and group:
// 4x or more when r <= T g C / (2 (T + g C)), 60 for T = 256, g = 4 and C = 1024.
//
// Encoded layer section (encoded_chunk.h frames it), little-endian, each array padded with zeros
// to a multiple of 4 bytes:
//   the first layer of a group: u32 rank of each plane; then for each plane U_r fp16 [T][r] and
//   the row scales fp32 [r];
//   every layer: for each plane, its columns of W fp16 [r][C] (row i divided by scale i).
// The frame's group_size is G. Decoding a layer reads its own section and its group's first one.
//
// Encoding costs a T x T x gC product per group and plane (about 0.5 s per 256-token chunk of a
// 32-layer, 8 x 128-channel model on one core); decoding a layer, a T x r x C product per plane.
// Layouts: dtype fp16, bf16 or fp32; anything else is kInvalidArgument from Encode.
// Thread-safety and ownership as for every Codec (codec.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "storage/codec/codec.h"

namespace strata::storage {

inline constexpr uint32_t kXkvDefaultGroupLayers = 4;
inline constexpr float kXkvDefaultEnergy = 0.99f;

class XkvCodec final : public Codec {
 public:
  CodecId id() const override { return CodecId::kXkv; }
  std::string_view error_bound() const override;

  absl::StatusOr<std::vector<std::byte>> Encode(const KvLayout& layout, uint32_t num_tokens,
                                                std::span<const std::byte> payload,
                                                const CodecParams& params) const override;
  absl::Status CheckParams(const KvLayout& layout, const CodecParams& params) const override;
  absl::Status Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                      std::span<std::byte> out) const override;
  absl::Status DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                           uint32_t layer, std::span<std::byte> out) const override;

  // The rank of each (group, plane) in a frame this codec wrote, group-major: what the energy
  // threshold chose. Errors as Decode's.
  static absl::StatusOr<std::vector<uint32_t>> Ranks(const KvLayout& layout,
                                                     std::span<const std::byte> encoded);
};

}  // namespace strata::storage
