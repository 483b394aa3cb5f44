// TokenDropCodec: the token-dropping codecs (ALGORITHMS.md section 5d). `drop_sink_recent` keeps a
// chunk's first tokens (StreamingLLM's attention sink) and its last ones (the recent window);
// `drop_h2o` keeps those and the heavy hitters: the tokens of highest importance, which the engine
// measures (H2O: the attention probability each token received) and supplies per token. Lossy
// eviction, not reconstruction: kept tokens are stored exactly, the others are gone.
//
// Blocks. Tokens are kept in whole blocks of B = CodecParams::group_size tokens (0: 16, the
// engines' usual KV block size; B must divide layout.chunk_tokens), because the paged attention
// kernel takes one position per block (kernels/paged_attention.h's block_positions): a kept block
// is read at its own positions however many blocks before it were dropped. Of a chunk of T
// tokens, block b holds tokens [bB, min((b + 1)B, T)), and these are kept:
//   sink    the first ceil(sink_tokens / B) blocks (sink_tokens 0: one block);
//   recent  the last ceil(recent_tokens / B) blocks (recent_tokens 0: T / 8, rounded up);
//   heavy   drop_h2o only: the ceil(heavy_tokens / B) other blocks (heavy_tokens 0: as recent)
//           whose importance, summed over their tokens, is highest (ties: the earlier block).
//           CodecParams::importance holds one finite, non-negative value per token of the chunk.
// Every layer and head keeps the same blocks (one block table serves every layer). A budget that
// covers every block keeps the chunk whole: the identity.
//
// Positions. Only KV whose keys are stored before RoPE may lose tokens (KvLayout::positional ==
// kNope): the fused-RoPE kernel rotates each kept key at its own position. Encode and CheckParams
// answer kFailedPrecondition for a rope_applied layout. drop_sink_recent given importance or
// heavy_tokens, drop_h2o without importance, or any other codec parameter: kInvalidArgument.
//
// Decoding. Decode and DecodeLayer deliver a chunk only when its frame kept every token; otherwise
// they answer kFailedPrecondition (a dropped token cannot be restored, and nothing stands in for
// it). DecodeKept delivers what any frame holds: its kept blocks and their tokens, as a chunk of
// the kept tokens in the same layout.
//
// Error: none on kept tokens; dropped tokens are absent, so the error is the attention output's
// over the kept tokens at their positions (codec_bench's attn_rel_err), not a per-element bound.
//
// Ratio: T / kept tokens, less the frame (52 + 16 L bytes) and per layer 4 + 4 k bytes for k kept
// blocks. Works on any dtype (bytes are copied).
//
// Encoded layer section (encoded_chunk.h frames it; group_size is B), little-endian: u32 k (at
// least 1: the sink block is always kept), then the k kept block indices (u32, strictly
// ascending), then for each plane the kept tokens' rows [kept token][kv_head][head_dim] in the
// dtype, zero-padded to a multiple of 4 bytes. Every layer holds the same block list, so each
// section stands alone.
//
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

inline constexpr uint32_t kTokenDropDefaultBlockTokens = 16;

// What a token-dropping frame holds.
struct KeptTokens {
  uint32_t block_tokens = 0;     // B
  std::vector<uint32_t> blocks;  // the kept blocks, ascending
  uint32_t num_tokens = 0;       // the kept tokens (the chunk's last block may be short)
  // layout.chunk_bytes(num_tokens): the kept tokens as a chunk of the layout, layer-major.
  std::vector<std::byte> payload;

  // The position in the chunk of each kept block's first token (blocks[i] * block_tokens): with
  // the chunk's own start added, PagedAttentionArgs::block_positions for these blocks.
  std::vector<int64_t> BlockPositions() const;
};

class TokenDropCodec final : public Codec {
 public:
  // kDropSinkRecent or kDropH2o (checked).
  explicit TokenDropCodec(CodecId id);

  CodecId id() const override { return id_; }
  std::string_view error_bound() const override;
  bool drops_tokens() const override { return true; }

  absl::StatusOr<std::vector<std::byte>> Encode(const KvLayout& layout, uint32_t num_tokens,
                                                std::span<const std::byte> payload,
                                                const CodecParams& params) const override;
  absl::Status CheckParams(const KvLayout& layout, const CodecParams& params) const override;
  absl::Status Decode(const KvLayout& layout, std::span<const std::byte> encoded,
                      std::span<std::byte> out) const override;
  absl::Status DecodeLayer(const KvLayout& layout, std::span<const std::byte> encoded,
                           uint32_t layer, std::span<std::byte> out) const override;

  // The blocks Encode keeps of a chunk of `num_tokens` tokens of `layout`, ascending. Encode's
  // errors for the layout and parameters (importance must hold num_tokens values for drop_h2o).
  absl::StatusOr<std::vector<uint32_t>> KeptBlocks(const KvLayout& layout, uint32_t num_tokens,
                                                   const CodecParams& params) const;

  // The kept blocks and tokens of a frame of this codec for `layout`. The errors of Decode
  // (kInvalidArgument for foreign bytes, kDataLoss for a truncated or corrupted frame, or layers
  // that disagree on the blocks they kept), never kFailedPrecondition.
  absl::StatusOr<KeptTokens> DecodeKept(const KvLayout& layout,
                                        std::span<const std::byte> encoded) const;

 private:
  // The kept blocks and their size in tokens (params.group_size, its default resolved).
  struct BlockChoice {
    uint32_t block_tokens = 0;
    std::vector<uint32_t> blocks;
  };
  // KeptBlocks, with the block size it checked.
  absl::StatusOr<BlockChoice> ChooseBlocks(const KvLayout& layout, uint32_t num_tokens,
                                           const CodecParams& params) const;

  CodecId id_;
};

}  // namespace strata::storage
