// TransferBatch is one step's loads or one step's saves as the worker connector's pipelines
// (load_pipeline.h, save_pipeline.h) carry them from planning to completion: the requests, the
// chunks with the lease or reservation each holds on the daemon, and, when the copies digest
// what they move, the digests. LayerCopier enqueues one layer of a batch's copies on a stream.
//
// Plain values; thread-compatible. A batch's digests are written by the stream its copies run
// on: read one only after the copies that feed it have completed. A chunk's `arena` keeps the
// session's arena mapped while copies name it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "connector/src/copy_plan.h"
#include "connector/src/engine_client.h"
#include "connector/src/paged_kv.h"
#include "core/kv_layout.h"
#include "storage/codec/codec.h"
#include "storage/device/copy_digests.h"
#include "storage/device/device_runtime.h"

namespace strata::connector::internal {

// The parts an encoded chunk's frame is staged in: what layer 0 decodes from (so the engine's
// first layer waits for no other), and the rest, in one copy as large as the old whole-frame one.
enum class FramePart { kLayer0, kRest };

// One chunk of a load or a save in flight.
struct ChunkTransfer {
  size_t request = 0;       // index into the batch's requests
  uint64_t generation = 0;  // session that issued the handle
  uint64_t handle = 0;      // lease or reservation; 0: none held
  bool planned = false;     // its copies were enqueued
  bool failed = false;
  uint64_t checksum = 0;
  uint32_t digest = 0;  // its index in TransferBatch::digests
  std::shared_ptr<const ArenaMapping> arena;
  std::vector<ArenaExtent> extents;  // its payload in the arena: the chunk, or its frame
  uint32_t chunk_tokens = 0;
  uint32_t token_begin = 0;
  uint32_t num_tokens = 0;
  int64_t position_begin = 0;

  // A load of a chunk the daemon placed encoded, which the stream decodes (LoadPipeline): its
  // codec; its frame, copied to frame_offset of the batch's staging in two parts (layer 0's
  // first, the rest before layer 1 decodes: FramePart); each layer decoded in turn to
  // layer_offset there, and copied into the engine from it through decoded_extents (one per
  // layer, each naming the staged layer, so the plan walks the chunk's payload as usual).
  const storage::Codec* codec = nullptr;
  uint64_t frame_offset = 0;
  uint64_t frame_bytes = 0;
  // Where layer 0's part of the frame ends: its header, layer table and section 0 (frame_bytes
  // when the head does not parse).
  uint64_t frame_layer0_end = 0;
  std::vector<std::byte> frame_head;  // its first bytes (DecodeLayerOp::frame_head)
  uint64_t layer_offset = 0;
  std::vector<ArenaExtent> decoded_extents;
  absl::Status decode_failure;  // written by the stream when a layer does not decode

  bool encoded() const { return codec != nullptr; }
  // The payload the engine's copies read: the arena's, or an encoded chunk's staged layers.
  ChunkCopy Copy(std::span<const int32_t> block_ids) const {
    return {encoded() ? decoded_extents : extents,
            chunk_tokens,
            token_begin,
            num_tokens,
            position_begin,
            block_ids};
  }
};

struct RequestTransfer {
  std::vector<int32_t> block_ids;
  int64_t token_begin = 0;
  int64_t token_end = 0;
  int64_t failed_from = 0;  // loads: positions from here to token_end failed (token_end: none)
};

struct TransferBatch {
  std::vector<RequestTransfer> requests;
  std::vector<ChunkTransfer> chunks;
  bool copies_failed = false;
  // Copies that digest what they move: one digest per planned chunk, filled by the stream (read
  // once its copies have completed). Null: the copies do not digest.
  std::unique_ptr<storage::CopyDigests> digests;
  // Device memory the encoded chunks stage in (their frames and decoded layers); null when the
  // batch has none.
  std::byte* staging = nullptr;
  // Saves: the layer the next enqueue must be for the digests to follow payload order; an
  // engine that saves layers out of order gets its checksums computed by the daemon instead.
  uint32_t next_layer = 0;
  bool layers_in_order = true;
};

// Gives each planned chunk of `batch` a digest for its copies to fill.
void AddDigests(TransferBatch& batch);

// Faults the arena pages of `batch`'s planned chunks into this process ahead of their copies, for
// writing (saves) or reading (loads): a system call an extent (ArenaMapping::Prefault, once per
// granule of the mapping's life) instead of a page fault every 4 KiB as the copies walk them.
// Nothing to do when `runtime` page-locked the arena at registration (host_registration).
void PrefaultArenaPages(const storage::DeviceRuntime& runtime, const TransferBatch& batch,
                        CopyDirection direction);

// Enqueues the copies of one layer of a batch. Keeps its run lists between calls so a step
// allocates nothing once warm. Not thread-safe: one per pipeline.
class LayerCopier {
 public:
  // Enqueues layer `layer` of `batch`'s planned chunks on `stream`, in `direction`. With
  // digests each chunk's runs feed its digest, kept apart from (never merged with) a
  // neighbour's, and a load's runs read its whole payload in order (AppendLayerRuns'
  // whole_payload). An encoded chunk's layer is copied from its staged decode, not digested
  // (its digest is its frame's: EnqueueFrames). Every planned chunk must have passed
  // ValidateChunkCopy against `layout` and `cache`. The stream's error otherwise (nothing of this
  // layer may have been enqueued).
  absl::Status Enqueue(const KvLayout& layout, const PagedKvCache& cache, TransferBatch& batch,
                       uint32_t layer, CopyDirection direction, storage::DeviceStream& stream);
  // Loads: enqueues the copy of `part` of each planned encoded chunk's frame from the arena to
  // its place in the batch's staging, digested when the batch digests. Layer 0's part first, then
  // the rest: each frame is staged (and digested) whole and in order. The stream's error
  // otherwise.
  absl::Status EnqueueFrames(TransferBatch& batch, FramePart part, storage::DeviceStream& stream);

 private:
  std::vector<storage::CopyRun> runs_;
  std::vector<storage::CopyRun> chunk_runs_;
  std::vector<storage::CopyRun> decoded_runs_;  // from staged decodes: copied, never digested
  std::vector<uint32_t> digest_of_;
};

}  // namespace strata::connector::internal
