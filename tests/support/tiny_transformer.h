// TinyTransformer: a small decoder-only transformer on CPU, the correctness oracle of the
// position-independent reuse (PIC, ALGORITHMS.md section 3). Random weights from a seed,
// Llama-shaped: token embedding, then per layer RMSNorm, Q/K/V projections with grouped-query
// attention, RoPE (kernels/rope.h), causal softmax attention, the output projection and a
// SiLU-gated MLP, each with a residual; no logits (the final hidden states are what reuse is judged
// by).
//
// Attention runs through the kernels' CPU references over a NoPE cache: keys are kept before RoPE
// and kernels::PagedAttention rotates each query and key at its own position (MEPIC's fused-RoPE
// path), one token per block so that every cached token carries its own position. With
// `rotate_explicitly`, queries and keys are rotated first (kernels::ApplyRope) and attention runs
// with no RoPE: the standard path the fused one must equal.
//
// Four entry points:
//   - Prefill: a whole prompt at positions first_position.., every token attending to those
//     before it (what an engine computes with no cache);
//   - Extend: new tokens attending to a given context (cached or computed KV of earlier tokens,
//     each at its own position) and causally to each other: chunked prefill, and reuse of cached
//     chunks at positions they were not computed at;
//   - SelectivePrefill: a prompt whose KV is cached (at its positions in the prompt) for some
//     tokens, recomputing only some of them layer by layer while the others' cached KV stands in
//     (ALGORITHMS.md section 3): EPIC's LegoLink and MEPIC (a fixed set recomputed from layer 0),
//     CacheBlend (a set chosen at a check layer by key deviation, kernels/blend.h);
//   - PagedSelectivePrefill: the same with a fixed set, as an engine runs MEPIC: over a paged cache
//     whose block table names the engine's own blocks (the recomputed tokens' KV is written
//     there) and the blocks of a second cache read in place (the daemon's pool pages), through
//     kernels::PagedAttention, with no copy of the shared KV.
// Pure functions of the weights; thread-safe after Create.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kv_transfer.h"
#include "kernels/rope.h"

namespace strata::testing {

struct TinyConfig {
  int64_t layers = 3;
  int64_t q_heads = 4;
  int64_t kv_heads = 2;  // GQA: q_heads / kv_heads query heads share one KV head
  int64_t head_dim = 32;
  int64_t ffn_dim = 256;
  int64_t vocab = 512;
  double rope_theta = 10000.0;
  int64_t max_position = 4096;
  uint64_t seed = 1;

  int64_t hidden() const { return q_heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
};

// The KV of some tokens, per layer: keys before RoPE (NoPE) and values, [token][kv_heads][head_dim]
// fp32, and each token's position.
struct TinyKv {
  std::vector<std::vector<float>> keys;    // [layer]
  std::vector<std::vector<float>> values;  // [layer]
  std::vector<int64_t> positions;

  // The KV of `tokens` tokens of a model shaped `c`, every row zero, at positions 0..: what stands
  // for tokens that have no cache (SelectivePrefill recomputes them).
  static TinyKv Zeros(const TinyConfig& c, int64_t tokens);

  int64_t num_tokens() const { return static_cast<int64_t>(positions.size()); }
  // The tokens [begin, end) of this KV.
  TinyKv Slice(int64_t begin, int64_t end) const;
  // This KV followed by `other`'s tokens.
  TinyKv Concat(const TinyKv& other) const;
  // The same KV at other positions (keys stay NoPE: moving a chunk is only new positions).
  TinyKv AtPositions(int64_t first_position) const;
};

struct TinyOutput {
  std::vector<float> hidden;  // [token][hidden]: the last layer's output
  TinyKv kv;                  // the new tokens' KV
};

// Which tokens SelectivePrefill recomputes: `always` (token indices, ascending) from layer 0. With
// a check layer (>= 0), CacheBlend's selection joins them: every token is computed through the
// layers before it; at the check layer the other tokens' fresh keys are compared with their cached
// ones, and the floor(others * ratio) that deviate most (kernels::SelectBlendTokens) are
// recomputed from there on with `always`.
struct TinyRecompute {
  std::vector<int32_t> always;
  int64_t check_layer = -1;  // < 0: no selection
  double ratio = 0;          // in [0, 1]
};

struct TinySelectiveOutput {
  std::vector<int32_t> recomputed;  // ascending: the tokens computed through the last layer
  std::vector<float> hidden;        // [recomputed][hidden]: their last layer's output
  TinyKv kv;  // every token's KV as attended: fresh where recomputed at that layer, else cached
};

// A paged KV cache as an engine's attention reads it (kernels/paged_attention.h), fp32 with NoPE
// keys: per layer, the engine's own blocks (written: each recomputed token's K and V rows at
// each layer) and a second cache read in place (MEPIC: the daemon's pool pages).
struct TinyPagedCache {
  kernels::PagedKvSpec engine_spec;           // fp32, 2 planes, the model's kv_heads and head_dim
  std::vector<kernels::PagedKvLayer> engine;  // [layer]
  kernels::PagedKvSpec shared_spec;           // num_blocks 0: none
  std::vector<kernels::PagedKvLayer> shared;  // [layer]; empty with no second cache
  // Per logical block of the prompt (block_size tokens at positions j * block_size..): an engine
  // block, or engine_spec.num_blocks + a block of the second cache.
  std::vector<int32_t> block_table;
  // Empty: block j holds positions j * block_size..; else each block's first position, ascending
  // (a thinned chunk's dropped blocks have no entry: PicBlockTable's positions).
  std::vector<int64_t> block_positions;
};

class TinyTransformer {
 public:
  // kInvalidArgument for non-positive sizes, q_heads not a multiple of kv_heads, an odd head_dim.
  static absl::StatusOr<TinyTransformer> Create(const TinyConfig& config);

  const TinyConfig& config() const { return config_; }

  // The whole prompt at positions [first_position, first_position + tokens.size()).
  absl::StatusOr<TinyOutput> Prefill(std::span<const uint32_t> tokens, int64_t first_position = 0,
                                     bool rotate_explicitly = false) const;

  // `tokens` at positions [first_position, ...), attending to every token of `context` (at its
  // positions) and causally to each other. kInvalidArgument for a context of another model
  // shape, a token outside the vocabulary or a position outside [0, max_position).
  absl::StatusOr<TinyOutput> Extend(const TinyKv& context, std::span<const uint32_t> tokens,
                                    int64_t first_position, bool rotate_explicitly = false) const;

  // `tokens` at the positions of `cached`, which holds a KV row for every one of them (the rows of
  // tokens recomputed at a layer are replaced there; the others stand in for the tokens' own KV).
  // Each recomputed token attends to every token before it, causally. Recomputing every token is
  // Prefill. kInvalidArgument for a cache of another shape or size, positions that do not
  // increase, `always` not ascending or out of range, a check layer past the last layer or a
  // ratio outside [0, 1].
  absl::StatusOr<TinySelectiveOutput> SelectivePrefill(std::span<const uint32_t> tokens,
                                                       const TinyKv& cached,
                                                       const TinyRecompute& recompute) const;

  // `tokens` at positions 0.. over `cache`, recomputing `recompute` (token indices, ascending)
  // from layer 0: at each layer their K and V rows are written into their engine blocks, and each
  // run of consecutive recomputed tokens attends causally over every token before it as the
  // block table names them (a batch of one sequence per run; blocks of the second cache read in
  // place; with block_positions, only the blocks the table holds, each at its positions). The other
  // tokens' KV must be in the cache already. Output: the recomputed tokens and their last layer's
  // hidden rows; `kv` is empty (the KV is in the cache). kInvalidArgument for a cache of another
  // shape or dtype, a table that does not cover the prompt, a recomputed token whose block is not
  // the engine's (nothing is written outside the engine's blocks), or `recompute` not ascending in
  // range.
  absl::StatusOr<TinySelectiveOutput> PagedSelectivePrefill(
      std::span<const uint32_t> tokens, const TinyPagedCache& cache,
      std::span<const int32_t> recompute) const;

 private:
  TinyTransformer(TinyConfig config, kernels::RopeTable rope)
      : config_(config), rope_(std::move(rope)) {}

  // Checks the context's shape against the model's (kInvalidArgument).
  absl::Status ValidateKv(const TinyKv& kv) const;
  // Checks a paged cache against the model's shape and the prompt's length (kInvalidArgument).
  absl::Status ValidatePagedCache(const TinyPagedCache& cache, int64_t num_tokens) const;
  // The scratch rows of ProjectQkv and AttentionAndMlpResidual, sized for the model: one per
  // call of Extend or SelectivePrefill, reused for every token and layer.
  struct Workspace {
    explicit Workspace(const TinyConfig& c)
        : normed(static_cast<size_t>(c.hidden())),
          projected(static_cast<size_t>(c.hidden())),
          gate(static_cast<size_t>(c.ffn_dim)),
          up(static_cast<size_t>(c.ffn_dim)) {}
    std::vector<float> normed, projected, gate, up;
  };
  // Of layer `layer`, for the token whose hidden row is `x`: its query, NoPE key and value.
  void ProjectQkv(int64_t layer, const float* x, Workspace& ws, float* q, float* key,
                  float* value) const;
  // Of layer `layer`: adds the attention output `attn` projected, then the MLP, to `x`.
  void AttentionAndMlpResidual(int64_t layer, const float* attn, Workspace& ws, float* x) const;

  // Attention of queries `q` (the last query_positions.size() of the tokens) over one layer's
  // `keys` and `values` ([token][kv_heads][head_dim], taken: rotated in place when
  // rotate_explicitly) at `positions`, causally.
  absl::Status Attend(std::span<const float> q, std::vector<float> keys, std::vector<float> values,
                      std::span<const int64_t> positions, std::span<const int64_t> query_positions,
                      bool rotate_explicitly, std::span<float> out) const;

  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
  };
  TinyConfig config_;
  kernels::RopeTable rope_;
  std::vector<float> embedding_;  // [vocab][hidden]
  std::vector<Layer> layers_;
};

// ||a - b||_F / ||b||_F.
double RelativeDifference(std::span<const float> a, std::span<const float> b);

// `n` tokens drawn by `seed` from [1, vocab): never 0, the tests' pad token.
std::vector<uint32_t> RandomTokens(size_t n, uint64_t seed, uint32_t vocab = 512);

// Rows [begin, end) of a row-major matrix of `width` columns (a view into `m`).
std::span<const float> Rows(std::span<const float> m, int64_t width, int64_t begin, int64_t end);

}  // namespace strata::testing
