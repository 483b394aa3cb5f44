// CacheGenCodec: the `cachegen` codec (ALGORITHMS.md section 5b, CacheGen as LMCache implements
// it): a coarse per-token quantizer whose codes are then entropy-coded per (layer, plane, channel)
// stream, so that channels that use few codes cost few bits.
//
// Quantizer (kernels/quant.h, the same math as the kivi codecs' values): each plane of a layer (K
// and V for MHA, the latent for MLA) is a matrix [num_tokens, C], C = num_kv_heads * head_dim,
// quantized per token in groups of G consecutive channels, asymmetric, b bits:
//   s = (max - min) / (2^b - 1), q = clamp(rint((x - min) / s), 0, 2^b - 1), x^ = q * s + min,
// with fp32 scales and zeros. b = CodecParams::bits, 2, 4 or 8 (default 8); G =
// CodecParams::group_size, default C (one scale per token and plane, as LMCache's max over every
// channel of the layer); G must divide C and C * b must fill whole 32-bit words. Asymmetric
// rather than LMCache's symmetric bins: the kernels' quantizer, with 2^b levels instead of 2^b - 1.
// Entropy stage (code_stream.h): each plane's codes, as residuals against each group's code of 0
// and each channel's median, one byte per code in channel-major order (every channel's stream over
// the tokens in one run), in one zstd frame; lossless, so decoding gives back the quantizer's
// codes bit for bit. code_stream.h says why zstd rather than a hand-written arithmetic coder.
//
// Error bound: the quantizer's. For a finite input element x of a group with scale s, decoded as y:
//     |x - y| <= s/2 * (1 + 1e-3) + ulp(y)/2,
// where ulp(y)/2 is the rounding of x^ to the layout's dtype (0 for fp32). A constant group has
// s = 0 and decodes exactly.
//
// Not taken from the CacheGen paper: its delta against an anchor token of each token group
// (absent from LMCache's code too) and its per-layer bin counts (model-specific). Delta coding
// pays where neighbouring tokens are alike; on shaped KV (storage/codec/testing/shaped_kv.h),
// whose tokens are independent, it doubles each channel's variance: the per-channel entropy of
// 4-bit key codes, anchors every 10 tokens, measured 41% larger (96,346 bytes against 68,173 for
// one layer of 8 x 128 channels and 256 tokens).
//
// Encoded layer section (encoded_chunk.h frames it), little-endian, every part 4-byte aligned:
//   u32 bits; u32 stream bytes of each plane;
//   for each plane: scales fp32 [token][C / G], zeros fp32 [token][C / G], its zstd stream, zero
//   padding to a multiple of 4.
// The frame's group_size is G. Decoding a layer reads only its own section.
//
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

inline constexpr uint32_t kCacheGenDefaultBits = 8;

class CacheGenCodec final : public Codec {
 public:
  CodecId id() const override { return CodecId::kCacheGen; }
  std::string_view error_bound() const override;

  absl::StatusOr<std::vector<std::byte>> Encode(const KvLayout& layout, uint32_t num_tokens,
                                                std::span<const std::byte> payload,
                                                const CodecParams& params) const override;
  absl::Status CheckParams(const KvLayout& layout, const CodecParams& params) const override;
  absl::Status Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                      std::span<std::byte> out) const override;
  absl::Status DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                           uint32_t layer, std::span<std::byte> out) const override;

  // The bytes the quantizer alone would take for this chunk: every code packed at b bits plus the
  // scales and zeros, in frames like this codec's. The figure the entropy stage is measured
  // against. kInvalidArgument as Encode for bad layouts, token counts or params.
  static absl::StatusOr<uint64_t> QuantizedOnlyBytes(const KvLayout& layout, uint32_t num_tokens,
                                                     const CodecParams& params);
};

}  // namespace strata::storage
