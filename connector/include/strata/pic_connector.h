// PicConnector: position-independent chunk reuse (ALGORITHMS.md section 3) for an engine whose
// attention can read shared pages of the daemon's device pool (T0) at positions of its choosing
// (the fused-RoPE path: kernels/paged_attention.h with block positions). A request's prompt
// comes with the token ranges that are reusable chunks (passages, documents, tool outputs), or
// with a separator token sequence between them as LMCache's blend mode takes; the connector
// pads the prompt as MEPIC does, keys each chunk by its content alone (KeyHasher::PicKey), and
// places the chunks in the pool with one acquire and one reserve. Its plan tells the engine,
// per request:
//   - the padded prompt to compute over (chunks start and end on block boundaries);
//   - each chunk's state: kShared (read its pool pages in place, at its positions here),
//     kWrite (compute its canonical KV, alone at positions 0.. and keys before RoPE, into its
//     pool pages, then Publish; a rope_applied layout's keys are rotated instead, and read
//     through a re-rotated copy: PicPoolView::keys_rotated), kPending (another engine is writing
//     it: Refresh a step later shares it; not waiting is computing it as prompt), kPrivate (compute
//     it as prompt; why_private says why);
//   - the tokens to compute from layer 0 by the request's recompute policy (MEPIC's block 1 of
//     each shared chunk, EPIC's LegoLink-k or LegoLink-0, CacheBlend with its check layer and
//     ratio: the engine selects CacheBlend's tokens itself at the check layer);
//   - where the pool lies in this process, to address its pages.
// End gives the request's pages back: shared pages become evictable once no request reads them,
// and what was reserved but not published is dropped.
//
// Failure model: a request never fails for the pool's sake. Bad markers, a bad separator or a
// bad policy are kInvalidArgument before anything is sent: the engine then treats the request
// as a plain prompt (prefix caching through SchedulerConnector). A daemon that is away or has no
// pool, or admission refusing pages, leave chunks kPrivate. The
// connector reconnects by itself. A session that drops releases its requests' pages in the
// daemon; they stay mapped here, unchanged until the pool evicts them for another writer, so a
// request whose session dropped may have read pages that changed under it: Verify says so
// (kAborted), and the engine recomputes what it computed from them.
//
// Thread-safety: thread-safe; requests are independent (one mutex guards the table of open
// requests; round trips run outside it, serialized on the session).
// Ownership: owns its daemon session and the pool mapping; a plan's addresses stay valid until
// its request's End (or the connector's destruction, which ends every open request).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/device/device_runtime.h"
#include "strata/connector.h"

namespace strata::connector {

enum class PicRecomputePolicy : uint8_t { kMepic, kLegoLink, kLegoLinkZero, kCacheBlend };

// "mepic", "legolink", "legolink0", "cacheblend"; kInvalidArgument naming the others.
absl::StatusOr<PicRecomputePolicy> ParsePicRecomputePolicy(std::string_view name);
std::string_view PicRecomputePolicyName(PicRecomputePolicy policy);

struct PicRequestOptions {
  PicRecomputePolicy recompute = PicRecomputePolicy::kMepic;
  // kLegoLink: the first k real tokens of each shared chunk (k > 0), after its leading pads.
  uint32_t legolink_tokens = 16;
  uint32_t check_layer = 1;   // kCacheBlend: a layer of the model
  double blend_ratio = 0.15;  // kCacheBlend: in [0, 1]
  // Chunks are shared only among requests of the same tenant; empty: among every request.
  std::string tenant;
};

// Tokens [begin, end).
struct PicTokenSpan {
  uint32_t begin = 0;
  uint32_t end = 0;
  friend bool operator==(const PicTokenSpan&, const PicTokenSpan&) = default;
};

enum class PicChunkState : uint8_t { kShared, kWrite, kPrivate, kPending };

struct PicChunk {
  PicTokenSpan padded;  // its tokens in the padded prompt, leading pads included
  PicTokenSpan source;  // its tokens in the prompt as given
  PicChunkState state = PicChunkState::kPrivate;
  std::vector<uint32_t> pool_pages;  // kShared, kWrite: one page per block, in chunk order
  // kShared chunks Compress thinned (token dropping): the position of each pool page's first
  // token in the chunk's padded span (pool_pages holds only the kept blocks). Empty: page i
  // holds block i.
  std::vector<uint32_t> pool_page_positions;
  std::string why_private;  // kPrivate, kPending
};

// The device pool as this process maps it: page p of layer l lies at
// base + l * layer_stride_bytes + p * page_bytes (every plane of one block of one layer).
struct PicPoolView {
  uintptr_t base = 0;
  uint32_t num_layers = 0;
  uint32_t num_pages = 0;
  uint64_t page_bytes = 0;
  uint64_t layer_stride_bytes = 0;
  uint32_t block_tokens = 0;
  // How the pages hold a chunk's keys, from the layout's positional format:
  //   false (nope): before RoPE. The fused-RoPE attention reads them in place at the chunk's
  //     positions here; a kWrite chunk is computed alone at positions 0.. and stored before RoPE.
  //   true (rope_applied): after RoPE at the chunk's canonical positions 0..n (its padded span,
  //     leading pads included), as an engine whose attention reads rotated keys stores them. Such
  //     an engine copies a kShared chunk's pages into its own blocks and re-rotates the keys by
  //     padded.begin on the way (kernels::ReRotateRope from positions j to padded.begin + j; the
  //     pages are never rotated in place: other requests read them); a kWrite chunk is computed
  //     alone at positions 0.. with RoPE applied. The chunk's pages are still shared, but each
  //     request holds a rotated copy too: CacheBlend's and EPIC's shape, not MEPIC's.
  bool keys_rotated = false;
};

// One block of the padded prompt (tokens [position, position + block_tokens), at those
// positions) as the attention backend reads it: a pool page in place, or a block of the
// request's own.
struct PicBlock {
  bool pool = false;   // true: pool page `index`, read in place; false: own block `index`
  uint32_t index = 0;  // the page, or the request's own block in [0, PicBlockTable::own_blocks)
  // An own block standing for part of a kShared chunk: before the forward pass, copy this pool
  // page into it (and for PicPoolView::keys_rotated, re-rotate its keys by the chunk's
  // padded.begin); the engine then writes the tokens it recomputes over the copy. Absent for a
  // block the engine computes whole.
  std::optional<uint32_t> fill_from_page;
  uint32_t position = 0;  // its first token's in the padded prompt: j * block_tokens for block j
};

// The request's block table. Shared chunks' blocks are pool pages read in place, but for the
// blocks a policy recomputes in (MEPIC's block 1, LegoLink-k's first k tokens), every shared block
// under CacheBlend (all tokens run through its early layers, and selected ones are rewritten
// after) and every shared block of a keys_rotated pool (read through a re-rotated copy): those are
// own blocks filled from their page. Nothing is ever written into a pool page.
struct PicBlockTable {
  // One per block of the padded prompt the attention reads, ascending by position: every
  // block but the dropped ones of thinned kShared chunks (pool_page_positions), which are gone
  // (the kernel takes the positions as PagedAttentionArgs::block_positions).
  std::vector<PicBlock> blocks;
  uint32_t own_blocks = 0;  // own blocks the request needs

  // The table kernels::PagedAttention takes with the pool as its second cache
  // (PagedAttentionArgs::shared_kv): own block i is own_block_ids[i], pool page p is
  // engine_num_blocks + p. kInvalidArgument when own_block_ids does not hold own_blocks ids, an
  // id lies outside [0, engine_num_blocks), or an entry would overflow int32.
  absl::StatusOr<std::vector<int32_t>> AttentionTable(std::span<const int32_t> own_block_ids,
                                                      int32_t engine_num_blocks) const;
};

struct PicPlan {
  std::vector<uint32_t> padded_tokens;
  std::vector<PicChunk> chunks;  // in prompt order
  // Ascending, disjoint: computed from layer 0 (prompt segments, chunks not kShared, and the
  // policy's share of each kShared chunk).
  std::vector<PicTokenSpan> recompute_from_layer_zero;
  // Tokens computed through the last layer: those, plus CacheBlend's selection.
  uint64_t recomputed_tokens = 0;
  // kWrite chunks are computed after this many pad tokens, whose KV is dropped (LegoLink-0's
  // dummies: its chunks are keyed apart from the others'); 0 for every other policy.
  uint32_t compile_dummies = 0;
  // Set when a chunk is kShared or kWrite.
  std::optional<PicPoolView> pool;
  PicBlockTable block_table;
};

class PicConnector {
 public:
  // The options' socket, engine id, layout, hashing, block_size (the engine's KV block: the
  // daemon's pool must use the same, or every chunk is kPrivate), io_timeout (each pool round
  // trip), backoffs, device backend and clock apply. `pad_token` fills the padding. `runtime`
  // maps the pool (null: made from the options' device backend). kInvalidArgument for
  // unusable options. Does not need the daemon to be up.
  static absl::StatusOr<std::unique_ptr<PicConnector>> Create(
      const ConnectorOptions& options, uint32_t pad_token,
      std::unique_ptr<storage::DeviceRuntime> runtime = nullptr);
  PicConnector(const PicConnector&) = delete;
  PicConnector& operator=(const PicConnector&) = delete;
  // Ends every open request.
  ~PicConnector();

  // Chunk spans from a separator token sequence: every non-empty run of tokens before a
  // separator is a chunk; the separators and what follows the last one are prompt.
  // kInvalidArgument for an empty separator.
  static absl::StatusOr<std::vector<PicTokenSpan>> MarkersFromSeparator(
      std::span<const uint32_t> prompt, std::span<const uint32_t> separator);

  // Plans request `request_id` over `prompt` whose chunks are `chunks` (sorted, disjoint,
  // non-empty, inside the prompt). kInvalidArgument naming the first bad chunk span or option;
  // kAlreadyExists for a request that is open.
  absl::StatusOr<PicPlan> Begin(std::string_view request_id, std::span<const uint32_t> prompt,
                                std::span<const PicTokenSpan> chunks,
                                const PicRequestOptions& options = {});
  // The engine wrote every layer of the request's kWrite chunks: commits them for later
  // requests. Returns the plan again: published chunks are kShared (this request keeps reading
  // them until End), those that could not be are kPrivate. kNotFound for a request not open;
  // errors of the call itself (the session dropped) leave the request open for End.
  absl::StatusOr<PicPlan> Publish(std::string_view request_id);
  // Places the request's kPending chunks again (call it once the engines writing them have had
  // a step): published ones become kShared, ones their writer gave up become kWrite (compute and
  // Publish them), the others stay kPending. Returns the plan again. kNotFound for a request not
  // open; errors of the call itself leave the pending chunks kPrivate.
  absl::StatusOr<PicPlan> Refresh(std::string_view request_id);
  // OK when the session that holds the request's kShared pages is still up (one round trip
  // confirms it): whatever the engine read from them before the call was the chunks' KV. Call it
  // after the forward pass that read them. kAborted when that session dropped, or the round trip
  // failed (the engine recomputes what it computed from kShared pages); kNotFound for a request
  // not open. A request with no kShared chunk is OK without a round trip.
  absl::Status Verify(std::string_view request_id) const;
  // Reports what the engine measured of the request's chunk `chunk` (an index into the plan's
  // chunks): one finite, non-negative importance per token of its padded span, H2O's (the
  // attention each token received; report again as more queries attend: the daemon sums them).
  // An operator's Compress with drop_h2o then keeps each chunk's heaviest blocks. kNotFound for
  // a request not open, kOutOfRange for a chunk past its chunks, kInvalidArgument for a report
  // of another length or a bad value; the daemon's errors.
  absl::Status ReportImportance(std::string_view request_id, size_t chunk,
                                std::span<const float> importance);
  // Releases the request's pages; the request is closed whatever the daemon answered.
  // kNotFound for a request not open; the daemon's errors (a dropped session is not one).
  absl::Status End(std::string_view request_id);

  size_t open_requests() const;

 private:
  struct Impl;
  explicit PicConnector(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::connector
