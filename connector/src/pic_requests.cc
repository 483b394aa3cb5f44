#include "connector/src/pic_requests.h"

#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "core/status_macros.h"
#include "fmt/format.h"

namespace strata::connector::internal {
namespace {

// The chunk holds nothing of the pool for this request, as `source` (kPrivate or kPending).
void Unplace(PicChunkPlacement& chunk, PicChunkSource source, absl::Status why) {
  chunk.source = source;
  chunk.handle = 0;
  chunk.pages.clear();
  chunk.positions.clear();
  chunk.why_private = std::move(why);
}

void MakePrivate(PicChunkPlacement& chunk, absl::Status why) {
  Unplace(chunk, PicChunkSource::kPrivate, std::move(why));
}

// The chunks of `request` whose source is `source`, by index.
std::vector<size_t> ChunksOf(const PicRequest& request, PicChunkSource source) {
  std::vector<size_t> out;
  for (size_t i = 0; i < request.chunks.size(); ++i) {
    if (request.chunks[i].source == source) out.push_back(i);
  }
  return out;
}

// The tokens LegoLink-k recomputes at the start of a shared chunk: its leading pads and its
// first k real tokens (EPIC counts real tokens), clamped to the chunk. Lengths are clamped
// before they are added: k may be anything up to UINT32_MAX.
uint32_t LegoLinkPrefix(const PicPolicy& policy, uint32_t padded_tokens, uint32_t pad_tokens) {
  return pad_tokens + std::min(padded_tokens - pad_tokens, policy.legolink_tokens);
}

std::vector<ChunkKey> KeysOf(const PicRequest& request, std::span<const size_t> chunks) {
  std::vector<ChunkKey> keys;
  keys.reserve(chunks.size());
  for (size_t i : chunks) keys.push_back(request.prompt.segments[request.chunks[i].segment].key);
  return keys;
}

}  // namespace

absl::Status ThinnedChunkReadable(const PicPolicy& policy, std::span<const uint32_t> positions,
                                  uint32_t padded_tokens, uint32_t pad_tokens,
                                  uint32_t block_tokens) {
  if (policy.recompute == PicRecompute::kCacheBlend) {
    return absl::FailedPreconditionError(
        "the chunk is thinned (token dropping), and CacheBlend runs every token of a shared chunk "
        "through its early layers");
  }
  if (positions.back() + uint64_t{block_tokens} > padded_tokens) {
    return absl::FailedPreconditionError(
        fmt::format("the thinned chunk keeps a block at position {}, past its {} tokens",
                    positions.back(), padded_tokens));
  }
  // LegoLink-k recomputes the pads and the first k real tokens: a block it recomputes in part
  // must be kept.
  const uint32_t recomputed = LegoLinkPrefix(policy, padded_tokens, pad_tokens);
  const uint32_t partial = policy.recompute == PicRecompute::kLegoLink &&
                                   recomputed < padded_tokens && recomputed % block_tokens != 0
                               ? recomputed / block_tokens * block_tokens
                               : padded_tokens;
  if (partial < padded_tokens && !std::binary_search(positions.begin(), positions.end(), partial)) {
    return absl::FailedPreconditionError(fmt::format(
        "LegoLink-{} recomputes part of the block at {}, which the thinned chunk dropped",
        policy.legolink_tokens, partial));
  }
  return absl::OkStatus();
}

std::vector<PicTokenRange> PicRequest::recomputed_from_layer_zero(uint32_t block_tokens) const {
  std::vector<PicTokenRange> ranges;
  auto add = [&](uint32_t begin, uint32_t end) {
    if (begin == end) return;
    if (!ranges.empty() && ranges.back().end == begin) {
      ranges.back().end = end;
    } else {
      ranges.push_back({begin, end});
    }
  };
  size_t next_chunk = 0;
  for (const PicSegment& segment : prompt.segments) {
    const uint32_t begin = segment.padded_begin, end = begin + segment.padded_tokens();
    if (segment.kind == SegmentKind::kPrompt ||
        chunks[next_chunk++].source != PicChunkSource::kShared) {
      add(begin, end);
      continue;
    }
    switch (policy.recompute) {
      case PicRecompute::kMepic:
        add(begin, begin + std::min(end - begin, block_tokens));
        break;
      case PicRecompute::kLegoLink:
        add(begin, begin + LegoLinkPrefix(policy, end - begin, segment.pad_tokens));
        break;
      case PicRecompute::kLegoLinkZero:
      case PicRecompute::kCacheBlend:
        break;
    }
  }
  return ranges;
}

uint64_t PicRequest::recomputed_tokens(uint32_t block_tokens) const {
  uint64_t tokens = 0;
  for (const PicTokenRange& range : recomputed_from_layer_zero(block_tokens)) {
    tokens += range.end - range.begin;
  }
  if (policy.recompute == PicRecompute::kCacheBlend) {
    uint64_t shared = 0;
    for (const PicChunkPlacement& chunk : chunks) {
      if (chunk.source == PicChunkSource::kShared) {
        shared += prompt.segments[chunk.segment].padded_tokens();
      }
    }
    tokens += static_cast<uint64_t>(static_cast<double>(shared) * policy.blend_ratio);
  }
  return tokens;
}

absl::StatusOr<PicRequest> PicRequests::Begin(std::span<const uint32_t> prompt,
                                              std::span<const SegmentMarker> markers,
                                              std::string_view tenant_salt,
                                              const PicPolicy& policy) {
  STRATA_RETURN_IF_ERROR(ValidatePicPolicy(policy, hasher_.layout().num_layers));
  PicOptions segments = options_.segments;
  segments.compile_variant = policy.compile_variant();
  PicRequest request{.policy = policy};
  STRATA_ASSIGN_OR_RETURN(request.prompt,
                          SplitPicPrompt(prompt, markers, hasher_, segments, tenant_salt));
  for (size_t i = 0; i < request.prompt.segments.size(); ++i) {
    if (request.prompt.segments[i].kind == SegmentKind::kChunk) {
      request.chunks.push_back({.segment = i});
    }
  }
  if (!request.chunks.empty()) Place(request);
  return request;
}

void PicRequests::Place(PicRequest& request) {
  auto all_private = [&](const absl::Status& why) {
    for (PicChunkPlacement& chunk : request.chunks) MakePrivate(chunk, why);
  };
  std::vector<size_t> all(request.chunks.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;

  // Acquire every chunk: the resident ones are shared, the rest get pages reserved below.
  auto acquired = client_.PoolAcquire(KeysOf(request, all), options_.timeout);
  if (!acquired.ok()) return all_private(acquired.status());
  const uint32_t block_tokens = acquired->device_pool->grant().block_tokens;
  if (block_tokens != options_.segments.block_tokens) {
    // Nothing of the pool is usable: give back what was acquired (the session's end would too).
    std::vector<uint64_t> handles;
    for (const PoolPlacement& chunk : acquired->value) {
      if (chunk.status.ok()) handles.push_back(chunk.handle);
    }
    (void)client_.Release(acquired->generation, handles, options_.timeout);
    return all_private(absl::FailedPreconditionError(
        fmt::format("the device pool has {}-token pages; the request is split in {}-token blocks",
                    block_tokens, options_.segments.block_tokens)));
  }
  request.generation = acquired->generation;
  request.pool = acquired->device_pool;
  Settle(request, all, acquired->value, block_tokens);
}

void PicRequests::Settle(PicRequest& request, std::span<const size_t> which,
                         std::vector<PoolPlacement>& acquired, uint32_t block_tokens) {
  std::vector<size_t> missing;
  std::vector<size_t> resident;
  std::vector<PoolPlacement> resident_placed;
  for (size_t j = 0; j < which.size(); ++j) {
    PoolPlacement& placed = acquired[j];
    const size_t i = which[j];
    if (placed.status.ok()) {
      resident.push_back(i);
      resident_placed.push_back(std::move(placed));
    } else if (placed.status.code() == absl::StatusCode::kNotFound) {
      missing.push_back(i);
    } else {
      MakePrivate(request.chunks[i], placed.status);
    }
  }
  Share(request, resident, resident_placed, block_tokens);
  if (missing.empty()) return;

  // Reserve pages for the missing chunks; a chunk that appears twice is written once.
  std::vector<size_t> to_reserve;
  absl::flat_hash_set<ChunkKey> seen;
  for (size_t i : missing) {
    const ChunkKey& key = request.prompt.segments[request.chunks[i].segment].key;
    if (seen.insert(key).second) {
      to_reserve.push_back(i);
    } else {
      MakePrivate(request.chunks[i],
                  absl::AlreadyExistsError("the same chunk appears earlier in the request"));
    }
  }
  std::vector<uint32_t> num_pages;
  for (size_t i : to_reserve) {
    num_pages.push_back(request.prompt.segments[request.chunks[i].segment].padded_tokens() /
                        block_tokens);
  }
  auto reserved = client_.PoolReserve(KeysOf(request, to_reserve), num_pages, options_.timeout);
  if (!reserved.ok() || reserved->generation != request.generation) {
    const absl::Status why =
        reserved.ok() ? absl::AbortedError("the session changed") : reserved.status();
    for (size_t i : to_reserve) MakePrivate(request.chunks[i], why);
    return;
  }
  for (size_t j = 0; j < to_reserve.size(); ++j) {
    PoolPlacement& placed = reserved->value[j];
    PicChunkPlacement& chunk = request.chunks[to_reserve[j]];
    if (placed.status.ok()) {
      chunk.source = PicChunkSource::kWrite;
      chunk.handle = placed.handle;
      chunk.pages = std::move(placed.pages);
    } else if (placed.status.code() == absl::StatusCode::kAborted ||
               placed.status.code() == absl::StatusCode::kAlreadyExists) {
      // Another engine is writing it, or committed it since the acquire: Refresh shares it.
      Unplace(chunk, PicChunkSource::kPending, placed.status);
    } else {
      MakePrivate(chunk, placed.status);  // kResourceExhausted: admission; kInvalidArgument
    }
  }
}

absl::Status PicRequests::Refresh(PicRequest& request) {
  std::vector<size_t> pending = ChunksOf(request, PicChunkSource::kPending);
  if (pending.empty()) return absl::OkStatus();
  auto acquired = client_.PoolAcquire(KeysOf(request, pending), options_.timeout);
  if (!acquired.ok() || acquired->generation != request.generation) {
    absl::Status why = acquired.status();
    if (acquired.ok()) {
      // Another session's references: not this request's to keep.
      std::vector<uint64_t> handles;
      for (const PoolPlacement& chunk : acquired->value) {
        if (chunk.status.ok()) handles.push_back(chunk.handle);
      }
      (void)client_.Release(acquired->generation, handles, options_.timeout);
      why = absl::AbortedError("the session changed");
    }
    for (size_t i : pending) MakePrivate(request.chunks[i], why);
    return why;
  }
  const size_t writes = ChunksOf(request, PicChunkSource::kWrite).size();
  Settle(request, pending, acquired->value, request.pool->grant().block_tokens);
  // Chunks the other engine gave up are this request's to write and publish.
  if (ChunksOf(request, PicChunkSource::kWrite).size() > writes) request.published = false;
  return absl::OkStatus();
}

absl::Status PicRequests::Publish(PicRequest& request) {
  if (request.published) return absl::OkStatus();
  request.published = true;
  const std::vector<size_t> written = ChunksOf(request, PicChunkSource::kWrite);
  if (written.empty()) return absl::OkStatus();
  std::vector<uint64_t> handles;
  for (size_t i : written) handles.push_back(request.chunks[i].handle);
  auto committed = client_.Commit(request.generation, handles, options_.timeout);
  if (!committed.ok()) {
    // The session is gone (its reservations with it) or the call failed: the engine keeps
    // reading what it computed through its own request, but nothing was published.
    for (size_t i : written) MakePrivate(request.chunks[i], committed.status());
    return committed.status();
  }
  // Committed chunks are unreferenced (evictable) until acquired: acquire them, so this request
  // reads them until End. A chunk evicted in between is the engine's to recompute; one found in
  // other pages holds the same KV (same key).
  std::vector<size_t> published;
  for (size_t j = 0; j < written.size(); ++j) {
    if ((*committed)[j].ok()) {
      published.push_back(written[j]);
      request.chunks[written[j]].handle = 0;
    } else {
      MakePrivate(request.chunks[written[j]], (*committed)[j]);
    }
  }
  if (published.empty()) return absl::OkStatus();
  auto acquired = client_.PoolAcquire(KeysOf(request, published), options_.timeout);
  if (!acquired.ok() || acquired->generation != request.generation) {
    const absl::Status why =
        acquired.ok() ? absl::AbortedError("the session changed") : acquired.status();
    for (size_t i : published) MakePrivate(request.chunks[i], why);
    return why;
  }
  std::vector<size_t> resident;
  std::vector<PoolPlacement> resident_placed;
  for (size_t j = 0; j < published.size(); ++j) {
    PoolPlacement& placed = acquired->value[j];
    if (placed.status.ok()) {
      resident.push_back(published[j]);
      resident_placed.push_back(std::move(placed));
    } else {
      MakePrivate(request.chunks[published[j]], placed.status);
    }
  }
  Share(request, resident, resident_placed, request.pool->grant().block_tokens);
  return absl::OkStatus();
}

void PicRequests::Share(PicRequest& request, std::span<const size_t> which,
                        std::vector<PoolPlacement>& acquired, uint32_t block_tokens) {
  std::vector<uint64_t> unreadable;
  for (size_t j = 0; j < which.size(); ++j) {
    PoolPlacement& placed = acquired[j];
    PicChunkPlacement& chunk = request.chunks[which[j]];
    if (!placed.positions.empty()) {
      const PicSegment& segment = request.prompt.segments[chunk.segment];
      absl::Status readable =
          ThinnedChunkReadable(request.policy, placed.positions, segment.padded_tokens(),
                               segment.pad_tokens, block_tokens);
      if (!readable.ok()) {
        unreadable.push_back(placed.handle);
        MakePrivate(chunk, std::move(readable));
        continue;
      }
    }
    chunk.source = PicChunkSource::kShared;
    chunk.handle = placed.handle;
    chunk.pages = std::move(placed.pages);
    chunk.positions = std::move(placed.positions);
  }
  // A failed release leaves the references to the session's end.
  if (!unreadable.empty()) (void)client_.Release(request.generation, unreadable, options_.timeout);
}

absl::Status PicRequests::ReportImportance(const PicRequest& request, size_t chunk,
                                           std::span<const float> importance) {
  if (chunk >= request.chunks.size()) {
    return absl::OutOfRangeError(
        fmt::format("chunk {} of a request of {} chunks", chunk, request.chunks.size()));
  }
  const PicSegment& segment = request.prompt.segments[request.chunks[chunk].segment];
  if (importance.size() != segment.padded_tokens()) {
    return absl::InvalidArgumentError(fmt::format(
        "{} importance values for a chunk of {} tokens (its padded span: one per token)",
        importance.size(), segment.padded_tokens()));
  }
  const std::span<const float> reports[] = {importance};
  return client_.PoolImportance(std::span<const ChunkKey>(&segment.key, 1), reports,
                                options_.timeout);
}

absl::Status PicRequests::End(PicRequest& request) {
  std::vector<uint64_t> references;
  std::vector<uint64_t> reservations;
  for (PicChunkPlacement& chunk : request.chunks) {
    if (chunk.handle == 0) continue;
    (chunk.source == PicChunkSource::kShared ? references : reservations).push_back(chunk.handle);
    chunk.handle = 0;
  }
  absl::Status status;
  // kAborted: the session (and with it every handle) is gone already.
  auto keep_first_error = [&](const absl::Status& s) {
    if (!s.ok() && s.code() != absl::StatusCode::kAborted && status.ok()) status = s;
  };
  if (!references.empty()) {
    keep_first_error(client_.Release(request.generation, references, options_.timeout).status());
  }
  if (!reservations.empty()) {
    keep_first_error(client_.Abort(request.generation, reservations, options_.timeout).status());
  }
  return status;
}

}  // namespace strata::connector::internal
