// LoadPipeline is the worker connector's load path (DESIGN.md section 5): for one step's loads
// it leases the chunks from the daemon (PrepareLoad), enqueues every layer's copies arena ->
// engine on its own stream, layer 0 first, with an event recorded after each layer, waits for
// the layers the engine asks for, then checks each chunk's checksum and releases the leases.
// Loads fail closed and never as an error: whatever cannot be read, copied or verified becomes
// block ids the engine recomputes (TakeFailedBlocks).
//
// Compressed chunks (ConnectorOptions::decode_on_device, for the codecs the runtime decodes):
// PrepareLoad names those codecs, and a chunk the daemon holds in one comes as its frame. Its
// frame is copied whole to device staging ahead of layer 0 (digested into its checksum check as
// a plain chunk's payload is), and each layer is decoded on the stream (DeviceStream::
// DecodeLayers) into a staged layer that the layer's copies read, all in stream order. A frame
// that does not decode fails its chunk (counted corrupt). The staging is one allocation per
// step's need (frames, plus one layer per chunk), kept for the next step up to
// kKeptStagingBytes.
//
// Step lifecycle (at most one step in flight):
//   Start -> WaitForLayer(0..n-1) -> Finish (run by the wait for the last layer, or called by
//   the owner when the engine moves on without waiting for every layer)
//   Fail: a step's loads rejected before Start; their blocks are reported as failed.
//
// Thread-safety: not thread-safe; the engine's worker thread drives it (WorkerConnector's
// contract). Its copies run on its stream (a HostRuntime copy thread or a CUDA stream); the
// destructor waits for them.
//
// Ownership: owns its stream, its per-layer events, the decode staging, the step in flight (whose
// chunks keep the arena mapped while copies name it) and the failed blocks not yet taken. Borrows
// the options, the runtime, the key hasher and the engine client, which must outlive it. The
// engine's memory that `cache` names must stay valid until Finish returns; the leases are released
// in Finish (or by the daemon when the session closes).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "connector/src/engine_client.h"
#include "connector/src/paged_kv.h"
#include "connector/src/transfer_batch.h"
#include "core/key_hasher.h"
#include "storage/device/device_runtime.h"
#include "strata/connector.h"

namespace strata::connector::internal {

// The load fields of WorkerStats.
struct LoadStats {
  uint64_t chunks_loaded = 0;
  uint64_t chunks_failed = 0;
  uint64_t bytes_loaded = 0;
  uint64_t chunks_corrupt = 0;        // loaded, but their bytes did not match their checksum or
                                      // (compressed) did not decode
  uint64_t chunks_decoded = 0;        // of chunks_loaded, compressed ones decoded on the device
  uint64_t encoded_bytes_loaded = 0;  // the frames of those
};

class LoadPipeline {
 public:
  // Creates the load stream and one event per layer of options.layout; the runtime's error
  // otherwise.
  static absl::StatusOr<std::unique_ptr<LoadPipeline>> Create(const ConnectorOptions& options,
                                                              storage::DeviceRuntime& runtime,
                                                              const KeyHasher& hasher,
                                                              EngineClient& client);
  LoadPipeline(const LoadPipeline&) = delete;
  LoadPipeline& operator=(const LoadPipeline&) = delete;
  // Waits for copies in flight (they name the engine's memory and the arena); releases nothing.
  ~LoadPipeline();

  // True between Start (with loads) and Finish.
  bool in_flight() const { return batch_.has_value(); }

  // Starts the loads of `specs` into `cache` (nothing when empty): one PrepareLoad per request,
  // then every layer's copies enqueued, ordered after `step.engine_stream` when given. Requests
  // or chunks that cannot be leased or planned are marked failed. Requires !in_flight().
  void Start(const PagedKvCache& cache, std::span<const TransferSpec> specs,
             const StepOptions& step);
  // Blocks until layer `layer` (< num_layers) of the step is copied; after the last layer,
  // Finish. A failed wait fails every chunk. Nothing when no step is in flight.
  void WaitForLayer(uint32_t layer);
  // Waits for every copy, verifies checksums (when configured), releases the leases and turns
  // every failure into failed blocks; the step is then over. Nothing when none is in flight.
  void Finish();
  // Reports every block of `spec`'s range as failed (a load that was never started).
  void Fail(const TransferSpec& spec);

  // Blocks whose load failed since the last call, sorted and unique.
  std::vector<int32_t> TakeFailedBlocks();
  const LoadStats& stats() const { return stats_; }

 private:
  LoadPipeline(const ConnectorOptions& options, storage::DeviceRuntime& runtime,
               const KeyHasher& hasher, EngineClient& client);

  // Decode staging kept after a step at most (more is freed once the step is over). Faulting a
  // fresh staging in costs a compressed load about half its speed (connector_bench), so the
  // staging of any step up to this size is kept for the next.
  static constexpr uint64_t kKeptStagingBytes = 1ull << 30;

  const KvLayout& layout() const { return options_.layout; }
  // Plans the decode of a chunk placed encoded: checks its codec and sizes and gives it room in
  // the staging, which grows to `staging_bytes`. kInvalidArgument naming the problem.
  absl::Status PlanDecode(ChunkTransfer& transfer, const LoadPlacement& placement,
                          uint64_t& staging_bytes) const;
  // Points the batch at staging of `staging_bytes` (allocated when the held one is smaller); on
  // failure the encoded chunks fail.
  void Stage(TransferBatch& batch, uint64_t staging_bytes);
  // Enqueues the decode of layer `layer` of each planned encoded chunk.
  absl::Status EnqueueDecodes(TransferBatch& batch, uint32_t layer);
  // Blocks holding positions [from, to) of `block_ids` become load errors.
  void FailPositions(std::span<const int32_t> block_ids, int64_t from, int64_t to);
  void Plan(const PagedKvCache& cache, std::span<const TransferSpec> specs);
  void Enqueue(const PagedKvCache& cache, const StepOptions& step);

  const ConnectorOptions& options_;
  storage::DeviceRuntime& runtime_;
  const KeyHasher& hasher_;
  EngineClient& client_;
  std::unique_ptr<storage::DeviceStream> stream_;
  std::vector<std::unique_ptr<storage::DeviceEvent>> layer_events_;  // one per layer
  LayerCopier copier_;
  // Bit c set: the codecs PrepareLoad asks to decode here (options, then the runtime).
  CodecSet decoded_codecs_;
  std::unique_ptr<storage::DeviceAllocation> staging_;  // named by copies in flight
  std::vector<storage::DecodeLayerOp> decodes_;         // one layer's, kept between calls
  // Declared after the stream: destroyed first, once ~LoadPipeline has waited for the copies.
  std::optional<TransferBatch> batch_;
  std::vector<int32_t> failed_blocks_;
  LoadStats stats_;
};

}  // namespace strata::connector::internal
