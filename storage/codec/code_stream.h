// The lossless entropy stage of the cachegen codec (cachegen_codec.h). A matrix of quantization
// codes [rows = tokens][cols = channels], each < 2^bits (bits 2, 4 or 8), is coded against a
// prediction: `offsets` [rows][cols / group_size] holds, per token and group, the code the
// quantizer gives the value 0 (the caller derives it from the scales and zeros the decoder also
// has), and each channel stores its median code relative to those offsets. The residuals
//     r[t][c] = (code[t][c] - offsets[t][c / group_size] - center[c]) mod 2^bits
// are centred on 0 whatever each token's scale and each channel's offset (the per-channel,
// per-token structure CacheGen's per-(layer, channel) models capture), and are coded one byte each
// in channel-major order (each channel's stream over every token in one run) by zstd (libzstd,
// Debian's libzstd-dev) at level 1 with a minimum match of 7 bytes. Stream layout:
//     cols bytes: center[c] mod 2^bits; then one zstd frame of the rows * cols residual bytes.
// Decoding inverts the arithmetic mod 2^bits, so it gives back exactly the codes encoded whatever
// the offsets, as long as the decoder is given the same offsets.
//
// Why zstd and these settings, measured on shaped KV (testing/shaped_kv.h; Llama-3.1-8B geometry,
// 256 tokens, one scale per token and plane), bytes of codes for one layer (K + V):
//   8 bits: zstd 383,449; order-0 entropy of the same residuals 378,660 (an ideal rANS or
//           arithmetic coder of them: 1.3% smaller); CacheGen's per-(layer, channel) order-0 models
//           of the raw codes, side tables free, 412,021; the raw codes alone in zstd 451,554.
//   4 bits: zstd 164,515; order-0 entropy of the residuals 148,969 (10% smaller); zstd level 19
//           147,468 at a small fraction of level 1's speed; zstd level 3 without the minimum
//           match 188,277 (its short matches in noisy codes cost more than literals).
// So zstd stays: a hand-written coder would gain at most 1-10% on the data we can measure.
//
// Thread-compatible: each object holds one zstd context; use one per thread (a codec call makes
// its own). The spans passed in stay the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct ZSTD_CCtx_s;
struct ZSTD_DCtx_s;

namespace strata::storage {

// The shape of one code matrix and its offsets.
struct CodeShape {
  int bits = 8;  // 2, 4 or 8
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t group_size = 0;  // channels per offset; divides cols

  uint64_t num_codes() const { return static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols); }
  uint64_t num_offsets() const { return num_codes() / static_cast<uint64_t>(group_size); }
};

class CodeStreamEncoder {
 public:
  CodeStreamEncoder();

  // The stream of `codes` (row-major, each < 2^bits) given `offsets` (row-major, num_offsets()).
  // kInvalidArgument for a bad shape or sizes that disagree; kInternal if zstd fails (it does not
  // on valid input).
  absl::StatusOr<std::vector<std::byte>> Encode(const CodeShape& shape,
                                                std::span<const uint16_t> codes,
                                                std::span<const uint8_t> offsets);

 private:
  std::unique_ptr<ZSTD_CCtx_s, size_t (*)(ZSTD_CCtx_s*)> context_;
  std::vector<uint8_t> residuals_;  // reused across calls
  std::vector<int> column_;
  std::vector<int> sorted_;
};

class CodeStreamDecoder {
 public:
  CodeStreamDecoder();

  // Decodes `stream` into `codes` (row-major, num_codes()), given the encoder's `offsets`.
  // kDataLoss when the stream is shorter than its centers, is not one zstd frame of exactly
  // num_codes() bytes, or holds a residual >= 2^bits; kInvalidArgument for a bad shape or sizes
  // that disagree. On failure `codes` holds unspecified values (each < 2^bits).
  absl::Status Decode(const CodeShape& shape, std::span<const std::byte> stream,
                      std::span<const uint8_t> offsets, std::span<uint16_t> codes);

 private:
  std::unique_ptr<ZSTD_DCtx_s, size_t (*)(ZSTD_DCtx_s*)> context_;
  std::vector<uint8_t> residuals_;
};

}  // namespace strata::storage
