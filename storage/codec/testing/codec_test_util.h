// gtest helpers shared by the codec tests (codec_test, cachegen_test, quant_recipe_test): layouts,
// encode / decode that add a test failure instead of returning a status, format 1 frames, the
// dtype rounding of a decoded value, and the checks every codec's frames must pass (foreign or
// truncated bytes refused; a corrupted layer fails alone). Test-only; thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/kv_layout.h"
#include "storage/codec/codec.h"

namespace strata::storage::testing {

// An MHA layout named `model_id` of the given shape.
KvLayout CodecTestLayout(std::string model_id, KvDtype dtype, uint32_t layers = 2,
                         uint32_t heads = 2, uint32_t head_dim = 64, uint32_t chunk_tokens = 64);

// The encoded frame, or empty after adding a test failure.
std::vector<std::byte> EncodeOrDie(const Codec& codec, const KvLayout& layout, uint32_t num_tokens,
                                   std::span<const std::byte> payload,
                                   const CodecParams& params = {});
// The decoded payload of `num_tokens` tokens (a test failure when Decode fails).
std::vector<std::byte> DecodeOrDie(const Codec& codec, const KvLayout& layout, uint32_t num_tokens,
                                   std::span<const std::byte> encoded);

// A kivi4 or kivi2 frame (format 2) as format 1 wrote it: the same codes and residual keys, with
// the fp16 scales and zeros widened to fp32 (exactly: fp16 values are fp32 values). `cols`: a
// plane's channels; `dtype_bytes`: the layout's dtype size.
std::vector<std::byte> AsFormat1(std::span<const std::byte> frame, uint64_t cols, int bits,
                                 uint64_t dtype_bytes);

// `frame`'s sections under its header with its format version set to `format_version`: a frame
// that claims another format than its sections were written in.
std::vector<std::byte> Relabel(std::span<const std::byte> frame, uint16_t format_version);

// Half a unit in the last place of y in `dtype` (0 for fp32): the rounding of a decoded value to
// the dtype.
double HalfUlp(KvDtype dtype, float y);

// Decode and every DecodeLayer of `bytes` (a frame of `num_tokens` tokens), copied into a buffer
// of exactly their size so ASan sees any read past it, must fail: Decode with `code`.
void ExpectRejected(const Codec& codec, const KvLayout& layout, uint32_t num_tokens,
                    std::span<const std::byte> bytes, absl::StatusCode code,
                    const std::string& what);

// `trials` times, flips one bit at a random place of a random layer's section of `encoded`:
// Decode and that layer's DecodeLayer must be kDataLoss, and every other layer must still decode
// to its bytes in the intact frame's Decode.
void ExpectCorruptSectionsFailAlone(const Codec& codec, const KvLayout& layout, uint32_t num_tokens,
                                    std::span<const std::byte> encoded, int trials, uint64_t seed);

}  // namespace strata::storage::testing
