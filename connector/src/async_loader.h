// AsyncLoader runs the worker connector's asynchronous loads (TransferSpec::async): loads whose
// chunks first come up from a lower tier of the daemon (its disk, a peer), so that they do not
// stall the engine's forward passes. Each Submit is one job; on the loader's thread a
// LoadPipeline over the loader's own daemon session leases the job's chunks (the daemon answers
// once it has promoted or fetched them), copies every layer into the engine's blocks, verifies
// the checksums and releases the leases. The job's requests and failed blocks then wait for
// TakeFinished.
//
// Why its own session and thread: a PrepareLoad that waits for a promotion holds back its
// session's later requests (engine.proto), and the engine thread's session must keep serving the
// synchronous loads and saves of the steps that run meanwhile.
//
// Every job ends: the daemon's answers and the releases have the options' io_timeout, and copies
// are local. A job that cannot run (the daemon gone, no caches registered) ends with every block
// of its loads failed. Every submitted request is reported once by TakeFinished.
//
// Thread-safety: Submit, TakeFinished, stats and in_flight are thread-safe. Jobs run one at a
// time on the loader's thread, in submission order.
//
// Ownership and lifecycle: owns its thread, session and pipeline (with its own copy stream).
// Borrows the options, the runtime and the key hasher, which must outlive it. The engine memory
// a job's cache names must stay valid until the job is reported (the engine keeps the blocks of
// a request that waits for its KV). The destructor lets the job in flight end (its copies waited
// for, its leases released) and drops the jobs not started: the engine is going away.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "connector/src/engine_client.h"
#include "connector/src/load_pipeline.h"
#include "connector/src/paged_kv.h"
#include "core/key_hasher.h"
#include "storage/device/device_runtime.h"
#include "strata/connector.h"

namespace strata::connector::internal {

// What TakeFinished hands over: requests whose asynchronous loads are over, the blocks of
// those loads that failed (each job's sorted and unique), and the requests among them that had
// a failed block.
struct AsyncLoadsOver {
  std::vector<std::string> request_ids;
  std::vector<int32_t> failed_blocks;
  std::vector<std::string> failed_request_ids;
};

class AsyncLoader {
 public:
  // Creates the session (it connects on first use) and the pipeline; starts the thread.
  static absl::StatusOr<std::unique_ptr<AsyncLoader>> Create(
      const ConnectorOptions& options, storage::DeviceRuntime& runtime, const KeyHasher& hasher,
      const EngineClientOptions& client_options);
  AsyncLoader(const AsyncLoader&) = delete;
  AsyncLoader& operator=(const AsyncLoader&) = delete;
  ~AsyncLoader();

  // Queues the loads `specs` (each TransferSpec::async) into the blocks of `cache`.
  void Submit(const PagedKvCache& cache, std::vector<TransferSpec> specs);
  // Queues `specs` to be reported as failed without reading anything (they cannot run).
  void SubmitFailed(std::vector<TransferSpec> specs);
  // The loads that ended since the last call. Does not wait.
  AsyncLoadsOver TakeFinished();

  // Requests submitted and not yet handed over by TakeFinished.
  uint64_t in_flight() const;
  // Requests handed over by TakeFinished, and the pipeline's counters.
  uint64_t requests_over() const;
  LoadStats stats() const;
  // The loader's own session with the daemon.
  SessionStats session_stats() const;

 private:
  struct Job {
    PagedKvCache cache;
    std::vector<TransferSpec> specs;
  };

  AsyncLoader(std::unique_ptr<EngineClient> client, std::unique_ptr<LoadPipeline> pipeline,
              int64_t block_size);
  void Run();

  const std::unique_ptr<EngineClient> client_;
  // Used by the loader's thread only; declared after the client it borrows.
  const std::unique_ptr<LoadPipeline> pipeline_;
  const int64_t block_size_;  // the engine's tokens per block

  mutable absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  AsyncLoadsOver over_ ABSL_GUARDED_BY(mu_);
  uint64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t requests_over_ ABSL_GUARDED_BY(mu_) = 0;
  LoadStats stats_ ABSL_GUARDED_BY(mu_);  // the pipeline's, as of its last job

  std::thread thread_;  // last: started once everything above exists
};

}  // namespace strata::connector::internal
