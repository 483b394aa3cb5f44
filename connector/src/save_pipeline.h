// SavePipeline is the worker connector's store path (DESIGN.md section 5): for one step's saves
// it reserves space in the daemon's arena (PrepareStore), enqueues each layer's copies engine ->
// arena on its own stream as the engine hands the layer over, then waits for the copies and
// commits the reservations (EngineClient::Commit -> one frame -> EngineSession::Commit ->
// HostTier::Commit), with the checksums its copies digested when the runtime can digest and the
// layers came in order (the daemon computes them otherwise). Saves are best effort and never an
// error: a chunk that cannot be reserved, copied or committed is skipped (aborted) and counted.
//
// Reservations the daemon streams to a peer (disaggregated prefill: TransferSpec::stream_to)
// are announced layer by layer: once a layer's copies have landed in the arena (an event
// recorded behind them, queried without waiting when the engine hands over a later layer),
// LayersSaved tells the daemon how many leading layers are written; the commit covers the rest.
//
// Step lifecycle (at most one step in flight):
//   Plan -> SaveLayer(i) as the engine hands layer i over (any order; a layer is copied once)
//   -> Wait | Finish
//   Wait:   the engine's WaitForSave: layers never handed over are copied after the engine's
//           stream, then Finish.
//   Finish: copies the missing layers at once, waits, commits, or aborts every reservation of
//           the step when any copy failed.
//
// Thread-safety: not thread-safe; the engine's worker thread drives it (WorkerConnector's
// contract). Its copies run on its stream (a HostRuntime copy thread or a CUDA stream); the
// destructor waits for them.
//
// Ownership: owns its stream, the step in flight (whose chunks keep the arena mapped while
// copies name it) and the engine stream last given. Borrows the options, the runtime, the key
// hasher and the engine client, which must outlive it. The `cache` given to Plan, and the
// engine memory it names, must stay valid and unchanged until the step is finished. A step
// abandoned by destruction commits nothing: the daemon aborts the session's reservations when
// its socket closes.
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

// The save fields of WorkerStats.
struct SaveStats {
  uint64_t chunks_saved = 0;  // committed
  uint64_t chunks_already_present = 0;
  uint64_t chunks_save_failed = 0;  // reserved but aborted or not committed
  uint64_t bytes_saved = 0;
};

class SavePipeline {
 public:
  // Creates the save stream; the runtime's error otherwise.
  static absl::StatusOr<std::unique_ptr<SavePipeline>> Create(const ConnectorOptions& options,
                                                              storage::DeviceRuntime& runtime,
                                                              const KeyHasher& hasher,
                                                              EngineClient& client);
  SavePipeline(const SavePipeline&) = delete;
  SavePipeline& operator=(const SavePipeline&) = delete;
  // Waits for copies in flight (they name the engine's memory and the arena); commits nothing.
  ~SavePipeline();

  // True between a Plan that reserved something and Wait / Finish.
  bool in_flight() const { return batch_.has_value(); }

  // The engine stream that later copies are ordered after (StartLoadKv's; nullopt: none).
  void SetEngineStream(const std::optional<storage::ExternalStream>& stream) {
    engine_stream_ = stream;
  }

  // Reserves space for the whole chunks of `specs` (the last one may be partial) in one
  // PrepareStore. Malformed specs, chunks already present and failed reservations are skipped;
  // nothing is in flight when nothing was reserved (or the daemon is away). Requires
  // !in_flight().
  void Plan(const PagedKvCache& cache, std::span<const TransferSpec> specs);
  // Enqueues layer `layer`'s (< num_layers) copies, ordered after `step.engine_stream` (which
  // becomes the engine stream) or the last engine stream given; a layer already enqueued is
  // not copied again. Nothing when no step is in flight.
  void SaveLayer(uint32_t layer, const StepOptions& step);
  // Orders the layers not yet enqueued after the engine stream, then Finish.
  void Wait();
  // Enqueues the layers not yet enqueued, waits for every copy, then commits the reservations
  // (one Commit per session) or, when any copy failed, aborts them. Nothing when none is in
  // flight.
  void Finish();

  const SaveStats& stats() const { return stats_; }

 private:
  SavePipeline(const ConnectorOptions& options, storage::DeviceRuntime& runtime,
               const KeyHasher& hasher, EngineClient& client);

  const KvLayout& layout() const { return options_.layout; }
  void EnqueueLayer(uint32_t layer);
  // Tells the daemon of the streamed reservations' leading layers whose copies have landed.
  void AnnounceLayers();

  const ConnectorOptions& options_;
  storage::DeviceRuntime& runtime_;
  const KeyHasher& hasher_;
  EngineClient& client_;
  std::unique_ptr<storage::DeviceStream> stream_;
  LayerCopier copier_;
  std::optional<storage::ExternalStream> engine_stream_;
  // The step in flight. Declared after the stream: destroyed first, once ~SavePipeline has
  // waited for the copies.
  const PagedKvCache* cache_ = nullptr;
  std::optional<TransferBatch> batch_;
  std::vector<bool> layers_saved_;
  // The step's streamed reservations (session `streamed_generation_`) and how many leading
  // layers the daemon was told of; an event behind each layer's copies, made once.
  std::vector<uint64_t> streamed_handles_;
  uint64_t streamed_generation_ = 0;
  uint32_t layers_announced_ = 0;
  std::vector<std::unique_ptr<storage::DeviceEvent>> layer_events_;
  SaveStats stats_;
};

}  // namespace strata::connector::internal
