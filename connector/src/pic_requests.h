// PicRequests places one request's position-independent chunks in the daemon's device pool (T0)
// for MEPIC's compute path (ALGORITHMS.md section 3c): it splits the prompt by its segment
// markers (pic_segments.h), finds the resident chunks and references them with one acquire, and
// reserves pool pages for the missing ones with one reserve. The engine then:
//   - kShared chunks: recomputes what the request's policy says (pic_policy.h; MEPIC, the
//     default: block 1 into a request-private page) and attends over the rest in place (their
//     pool pages, with their block positions: the fused-RoPE kernel);
//   - kWrite chunks: computes the chunk's NoPE KV into the reserved pages (every block of every
//     layer), then Publish commits them for later requests;
//   - kPending chunks: another engine is writing them. Refresh, once that engine has published
//     (a step later), shares them; an engine that does not wait computes them privately, which is
//     always correct;
//   - kPrivate chunks: computes them privately (the pool could not take them: admission refused
//     the pages, the session has no pool or dropped);
//   - prompt segments: computes them privately.
// End releases the request's references (its kShared pages become evictable again once no other
// request reads them) and aborts what was reserved but not published.
//
// Failure model: a request never fails for the pool's sake. Bad markers are kInvalidArgument
// (the caller falls back to prefix caching); a pool call that fails (the daemon away, a timeout)
// leaves the affected chunks kPrivate. Handles die with their session: Publish / End of a
// request whose session dropped only forget them (the daemon has released them already).
//
// Thread-safety: thread-safe as the EngineClient is (each call holds no state of its own beyond
// the request it is given; a request is used by one thread at a time).
// Ownership: borrows the client and the hasher, which must outlive it. A request holds the pool
// mapping its pages are in.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "connector/src/engine_client.h"
#include "connector/src/pic_policy.h"
#include "connector/src/pic_segments.h"
#include "core/key_hasher.h"

namespace strata::connector::internal {

enum class PicChunkSource : uint8_t {
  kShared,   // resident: blocks 2..n read in place from `pages`, block 1 recomputed privately
  kWrite,    // reserved: compute it into `pages`, then Publish
  kPrivate,  // computed privately; the pool holds nothing of it for this request
  kPending,  // another engine is writing it: Refresh may share it; until then as kPrivate
};

struct PicChunkPlacement {
  size_t segment = 0;  // its index in PicPrompt::segments
  PicChunkSource source = PicChunkSource::kPrivate;
  uint64_t handle = 0;          // kShared: the reference; kWrite: the reservation
  std::vector<uint32_t> pages;  // pool pages, one per block, in chunk order (kShared, kWrite)
  // A thinned kShared chunk's (PoolPlacement::positions): pages holds its kept blocks only, and
  // each one's position in the chunk. Empty: page i holds block i.
  std::vector<uint32_t> positions;
  absl::Status why_private;  // kPrivate, kPending: why the pool does not hold it for us
};

// Tokens [begin, end) of the padded prompt.
struct PicTokenRange {
  uint32_t begin = 0;
  uint32_t end = 0;
  friend bool operator==(const PicTokenRange&, const PicTokenRange&) = default;
};

struct PicRequest {
  PicPrompt prompt;
  PicPolicy policy;
  std::vector<PicChunkPlacement> chunks;  // one per chunk segment, in prompt order
  uint64_t generation = 0;                // of the session the handles belong to
  std::shared_ptr<const DevicePoolMapping> pool;
  bool published = false;

  // The tokens the engine computes from layer 0 on, by the request's policy (pic_policy.h): every
  // prompt segment (padded), every chunk not kShared, and of each kShared chunk its first block
  // (kMepic), its leading pads and first legolink_tokens real tokens (kLegoLink) or nothing
  // (kLegoLinkZero, kCacheBlend). Ascending, disjoint, merged where they touch.
  std::vector<PicTokenRange> recomputed_from_layer_zero(uint32_t block_tokens) const;
  // Tokens the engine computes through the last layer: those above, plus CacheBlend's selection
  // (floor(kShared chunks' tokens x blend_ratio)).
  uint64_t recomputed_tokens(uint32_t block_tokens) const;
};

// OK when a request of `policy` can read a thinned chunk (its kept blocks at `positions`, in a
// segment of `padded_tokens` tokens, `pad_tokens` of them leading pads) in place: every kept
// block inside the segment, and no dropped block that the policy recomputes only in part (its
// other tokens would be missing).
// kFailedPrecondition naming why not (CacheBlend reads every token through its early layers).
absl::Status ThinnedChunkReadable(const PicPolicy& policy, std::span<const uint32_t> positions,
                                  uint32_t padded_tokens, uint32_t pad_tokens,
                                  uint32_t block_tokens);

struct PicRequestsOptions {
  // block_tokens must be the pool's (DevicePoolGrant::block_tokens). compile_variant is not
  // used: each request's policy sets it (PicPolicy::compile_variant).
  PicOptions segments;
  std::chrono::milliseconds timeout{1000};
};

class PicRequests {
 public:
  PicRequests(EngineClient& client, const KeyHasher& hasher, PicRequestsOptions options)
      : client_(client), hasher_(hasher), options_(options) {}

  // The request's chunks placed as above, in the namespace of its `tenant_salt` (empty: chunks
  // shared by every tenant), keyed by the compile variant of its recompute `policy`.
  // kInvalidArgument for bad markers (pic_segments.h) or a bad policy (ValidatePicPolicy).
  absl::StatusOr<PicRequest> Begin(std::span<const uint32_t> prompt,
                                   std::span<const SegmentMarker> markers,
                                   std::string_view tenant_salt = {}, const PicPolicy& policy = {});
  // Commits the kWrite chunks (the engine wrote every layer of their pages) so later requests
  // share them; each then becomes kShared for this request (it keeps reading them until End).
  // A chunk whose commit fails becomes kPrivate. Errors of the call itself (the session
  // dropped); the request stays valid for End.
  absl::Status Publish(PicRequest& request);
  // Places the request's kPending chunks again: those the other engine has published become
  // kShared (referenced until End), those it gave up become kWrite (this request writes them:
  // Publish again), those still being written stay kPending; a failure leaves them kPrivate.
  // Errors of the call itself; the request stays valid for End.
  absl::Status Refresh(PicRequest& request);
  // Releases the request's references and aborts its unpublished reservations. Idempotent.
  absl::Status End(PicRequest& request);
  // Reports what the engine measured of chunk `chunk` (an index into request.chunks) of the
  // request: one finite, non-negative importance per token of its padded span (H2O's: the
  // attention each token received). The daemon sums a chunk's reports; Compress with drop_h2o
  // keeps its heaviest blocks (engine.proto's PoolImportanceRequest). kOutOfRange for a chunk
  // past the request's, kInvalidArgument for a report of another length; the daemon's errors.
  absl::Status ReportImportance(const PicRequest& request, size_t chunk,
                                std::span<const float> importance);

 private:
  // Acquires the resident chunks of `request`, then reserves the rest.
  void Place(PicRequest& request);
  // Of the chunks `which` (indices into request.chunks) whose acquire answered `acquired`, one
  // each: the resident ones become kShared; the rest get pages reserved (kWrite), or become
  // kPending (another engine writes them) or kPrivate.
  void Settle(PicRequest& request, std::span<const size_t> which,
              std::vector<PoolPlacement>& acquired, uint32_t block_tokens);
  // Makes the chunks `which` kShared by their acquires `acquired` (OK ones, one each), but for
  // a thinned chunk the request cannot read (ThinnedChunkReadable): that one becomes kPrivate,
  // and its reference is given back.
  void Share(PicRequest& request, std::span<const size_t> which,
             std::vector<PoolPlacement>& acquired, uint32_t block_tokens);

  EngineClient& client_;
  const KeyHasher& hasher_;
  const PicRequestsOptions options_;
};

}  // namespace strata::connector::internal
