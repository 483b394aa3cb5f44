#include "connector/src/transfer_batch.h"

#include <algorithm>

namespace strata::connector::internal {

void AddDigests(TransferBatch& batch) {
  uint32_t next = 0;
  for (ChunkTransfer& c : batch.chunks) {
    if (c.planned) c.digest = next++;
  }
  batch.digests = std::make_unique<storage::CopyDigests>(next);
}

void PrefaultArenaPages(const storage::DeviceRuntime& runtime, const TransferBatch& batch,
                        CopyDirection direction) {
  for (const ChunkTransfer& c : batch.chunks) {
    if (!c.planned || c.arena == nullptr) continue;
    if (runtime.Capabilities().host_registration && c.arena->registered()) continue;
    for (const ArenaExtent& extent : c.extents) {
      // ValidateChunkCopy checked the extents lie inside the arena.
      c.arena->Prefault(extent, direction == CopyDirection::kEngineToArena);
    }
  }
}

absl::Status LayerCopier::Enqueue(const KvLayout& layout, const PagedKvCache& cache,
                                  TransferBatch& batch, uint32_t layer, CopyDirection direction,
                                  storage::DeviceStream& stream) {
  const bool digested = batch.digests != nullptr;
  runs_.clear();
  digest_of_.clear();
  decoded_runs_.clear();
  for (const ChunkTransfer& c : batch.chunks) {
    if (!c.planned) continue;
    if (c.encoded()) {
      AppendLayerRuns(layout, cache, batch.staging, c.Copy(batch.requests[c.request].block_ids),
                      layer, direction, decoded_runs_);
      continue;
    }
    chunk_runs_.clear();
    AppendLayerRuns(layout, cache, c.arena->base(), c.Copy(batch.requests[c.request].block_ids),
                    layer, direction, digested ? chunk_runs_ : runs_,
                    /*whole_payload=*/digested && direction == CopyDirection::kArenaToEngine);
    runs_.insert(runs_.end(), chunk_runs_.begin(), chunk_runs_.end());
    digest_of_.insert(digest_of_.end(), chunk_runs_.size(), c.digest);
  }
  absl::Status copied =
      digested ? stream.CopyDigested(runs_, digest_of_, *batch.digests) : stream.Copy(runs_);
  if (copied.ok() && !decoded_runs_.empty()) copied = stream.Copy(decoded_runs_);
  return copied;
}

absl::Status LayerCopier::EnqueueFrames(TransferBatch& batch, FramePart part,
                                        storage::DeviceStream& stream) {
  runs_.clear();
  digest_of_.clear();
  for (const ChunkTransfer& c : batch.chunks) {
    if (!c.planned || !c.encoded()) continue;
    const uint64_t begin = part == FramePart::kLayer0 ? 0 : c.frame_layer0_end;
    const uint64_t end = part == FramePart::kLayer0 ? c.frame_layer0_end : c.frame_bytes;
    uint64_t at = 0;  // the frame offset of the extent's first byte
    for (const ArenaExtent& extent : c.extents) {
      if (at >= end) break;
      const uint64_t from = std::max(begin, at);
      const uint64_t to = std::min(end, at + extent.length);
      if (from < to) {
        runs_.push_back({c.arena->base() + extent.offset + (from - at),
                         batch.staging + c.frame_offset + from, to - from});
        digest_of_.push_back(c.digest);
      }
      at += extent.length;
    }
  }
  if (runs_.empty()) return absl::OkStatus();
  return batch.digests != nullptr ? stream.CopyDigested(runs_, digest_of_, *batch.digests)
                                  : stream.Copy(runs_);
}

}  // namespace strata::connector::internal
