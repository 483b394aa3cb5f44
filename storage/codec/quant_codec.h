// QuantCodec: the quantizing codecs `int8`, `kivi8`, `kivi4` and `kivi2` (ALGORITHMS.md 5a), built
// on the CPU quantization reference in kernels/quant.h (its math, rounding and code packing).
//
// Each plane of a layer (K and V for MHA, the latent for MLA) is a matrix [num_tokens, C] with
// C = num_kv_heads * head_dim channels, quantized in groups with scales (and zeros): int8's fp32,
// the kivi codecs' fp16 (fp32 for kivi4 and kivi2 in frames of format 1, which still decode):
//   int8   symmetric, 8 bits, one group per token and head (head_dim channels), every plane:
//          s = max|x| / 127, q = clamp(rint(x / s), -127, 127), x^ = q * s.
//   kivi8, kivi4, kivi2   asymmetric, b = 8, 4 or 2 bits, group size G (CodecParams::group_size,
//          which must divide C; default the largest power of two that divides C up to 128 for
//          kivi8, 64 for kivi4, 32 for kivi2): s = (max - z) / (2^b - 1), q = clamp(rint((x - z) /
//          s), 0, 2^b - 1), x^ = q * s + z, where z is min rounded down to an fp16 value and s is
//          rounded up to one (kernels::QuantParams::fp16_params; format 1's fp32 z = min and s).
//          Keys, and an MLA latent, per channel: a group is G consecutive tokens of one channel;
//          the last num_tokens mod G tokens (KIVI's residual) are kept unquantized, in the
//          layout's dtype. Values per token: a group is G consecutive channels of one token.
//          A group beyond fp16's range (|x| > 65504) makes Encode kOutOfRange (a disk tier then
//          stores the chunk as it is).
// rint rounds half to even; a constant group gets s = 0 and decodes exactly (kivi: when its value
// is an fp16 value, or in format 1).
//
// Error bound. For a finite input element x of a group with scale s, decoded as y:
//     |x - y| <= s/2 * (1 + 1e-3) + ulp(y)/2,
// where ulp(y)/2 is the rounding of x^ to the layout's dtype (half a unit in the last place of y in
// fp16 or bf16; 0 for fp32). Residual keys decode bit for bit.
//
// Layouts: dtype fp16, bf16 or fp32; C a multiple of 4 (int8) or of G and of 32/b (kivi).
// Anything else is kInvalidArgument from Encode.
//
// Encoded layer section (encoded_chunk.h frames it): for each plane in order, its codes (packed
// 32/b per little-endian uint32, least significant bits first, row-major over [token][channel]),
// its scales (int8 fp32 [token][kv_head]; kivi fp16, keys [token / G][channel], values
// [token][channel / G]), its zeros (kivi only, shaped as its scales), then its residual tokens
// (kivi keys only, raw). Ratio over a 16-bit payload, before the residual and the frame: int8
// 2 / (1 + 4 / head_dim), 1.94x at head_dim 128; kivi<b> 16 / (b + 32 / G): kivi8 1.94x at
// G = 128, kivi4 3.56x at G = 64 (3.2x at 32), kivi2 5.33x at G = 32. kivi8 has int8's ratio and
// a third of its error on KV with outlier key channels (keys scaled per channel).
//
// Encode runs kernels::Quantize per plane; Decode runs kernels::Dequantize, whose loops the
// compiler vectorizes (with an AVX2 build of them on x86-64 CPUs that have it), after checking the
// layer's checksum.
// Thread-safety and ownership as for every Codec (codec.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv_layout.h"
#include "kernels/quant.h"
#include "storage/codec/codec.h"
#include "storage/codec/encoded_chunk.h"

namespace strata::storage {

// How one layer of a QuantCodec frame decodes, for a decoder other than the codec's own (a device
// runtime's kernels, which read the frame where the host cannot): each plane's parts as offsets
// in the layer's section, and its place in the decoded layer (core/kv_layout.h's plane order).
// The codec's own Encode and Decode run the same recipe on the CPU. A plain value.
struct QuantLayerRecipe {
  struct Plane {
    // Its quantization (kernels/quant.h); fp16_params: the section holds its scales and zeros as
    // fp16 values (they widen to fp32 exactly), else as fp32.
    kernels::QuantParams params;
    int64_t quantized_rows = 0;  // its leading tokens, decoded from codes (0: none)
    uint64_t codes_offset = 0;   // code_words packed uint32 words
    uint64_t code_words = 0;
    uint64_t scales_offset = 0;  // num_groups scales
    uint64_t zeros_offset = 0;   // num_groups zeros (asymmetric only)
    uint64_t num_groups = 0;
    uint64_t residual_offset = 0;  // its trailing tokens kept raw (kivi keys), residual_bytes
    uint64_t residual_bytes = 0;
    uint64_t out_offset = 0;  // the plane's place in the decoded layer: out_bytes, of which the
    uint64_t out_bytes = 0;   // last residual_bytes are the residual tokens
    uint64_t param_bytes() const { return params.fp16_params ? 2 : 4; }
  };
  KvDtype dtype = KvDtype::kBfloat16;
  int64_t cols = 0;            // channels of a plane: num_kv_heads * head_dim
  uint32_t group_size = 0;     // as the frame stores it
  uint64_t section_bytes = 0;  // of each layer
  uint64_t layer_bytes = 0;    // decoded, of each layer
  uint32_t num_planes = 0;
  std::array<Plane, 2> planes;  // the first num_planes
};

class QuantCodec final : public Codec {
 public:
  // id: CodecId::kInt8, kKivi8, kKivi4 or kKivi2 (checked).
  explicit QuantCodec(CodecId id);

  CodecId id() const override { return id_; }
  std::string_view error_bound() const override;

  absl::StatusOr<std::vector<std::byte>> Encode(const KvLayout& layout, uint32_t num_tokens,
                                                std::span<const std::byte> payload,
                                                const CodecParams& params) const override;
  absl::Status CheckParams(const KvLayout& layout, const CodecParams& params) const override;
  absl::Status Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                      std::span<std::byte> out) const override;
  absl::Status DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                           uint32_t layer, std::span<std::byte> out) const override;

  // The recipe of a frame of this codec for `layout`, parsed whole or from its head
  // (EncodedChunk::ParseHead). The errors Decode gives for such a frame (but its section
  // checksums, which are not read).
  absl::StatusOr<QuantLayerRecipe> Recipe(const KvLayout& layout, const EncodedChunk& frame) const;

 private:
  CodecId id_;
  int bits_;
  bool kivi_;  // kivi grouping (asymmetric, keys per channel); else int8
};

}  // namespace strata::storage
