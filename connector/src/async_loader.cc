#include "connector/src/async_loader.h"

#include <algorithm>
#include <span>
#include <utility>

#include "core/status_macros.h"

namespace strata::connector::internal {
namespace {

// The blocks of `spec`'s positions [token_begin, token_end).
std::span<const int32_t> LoadedBlocks(const TransferSpec& spec, int64_t block_size) {
  if (spec.token_begin >= spec.token_end || block_size <= 0) return {};
  const int64_t size = static_cast<int64_t>(spec.block_ids.size());
  const int64_t first = std::min(spec.token_begin / block_size, size);
  const int64_t last = std::min((spec.token_end - 1) / block_size + 1, size);
  return std::span<const int32_t>(spec.block_ids).subspan(first, last - first);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AsyncLoader>> AsyncLoader::Create(
    const ConnectorOptions& options, storage::DeviceRuntime& runtime, const KeyHasher& hasher,
    const EngineClientOptions& client_options) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<EngineClient> client,
                          EngineClient::Create(client_options));
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<LoadPipeline> pipeline,
                          LoadPipeline::Create(options, runtime, hasher, *client));
  return std::unique_ptr<AsyncLoader>(
      new AsyncLoader(std::move(client), std::move(pipeline), options.block_size));
}

AsyncLoader::AsyncLoader(std::unique_ptr<EngineClient> client,
                         std::unique_ptr<LoadPipeline> pipeline, int64_t block_size)
    : client_(std::move(client)), pipeline_(std::move(pipeline)), block_size_(block_size) {
  thread_ = std::thread([this] { Run(); });
}

AsyncLoader::~AsyncLoader() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void AsyncLoader::Submit(const PagedKvCache& cache, std::vector<TransferSpec> specs) {
  if (specs.empty()) return;
  absl::MutexLock lock(&mu_);
  in_flight_ += specs.size();
  queue_.push_back({.cache = cache, .specs = std::move(specs)});
}

void AsyncLoader::SubmitFailed(std::vector<TransferSpec> specs) {
  for (TransferSpec& spec : specs) spec.fail = true;  // planned as failed: no cache is read
  Submit(PagedKvCache{}, std::move(specs));
}

AsyncLoadsOver AsyncLoader::TakeFinished() {
  absl::MutexLock lock(&mu_);
  AsyncLoadsOver over = std::move(over_);
  over_ = {};
  in_flight_ -= over.request_ids.size();
  requests_over_ += over.request_ids.size();
  return over;
}

uint64_t AsyncLoader::in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

uint64_t AsyncLoader::requests_over() const {
  absl::MutexLock lock(&mu_);
  return requests_over_;
}

SessionStats AsyncLoader::session_stats() const { return ToSessionStats(client_->stats()); }

LoadStats AsyncLoader::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void AsyncLoader::Run() {
  while (true) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](AsyncLoader* self)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stopping_ || !self->queue_.empty(); },
          this));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    // The job's requests are not in the engine's batch: no ordering with its stream.
    pipeline_->Start(job.cache, job.specs, {});
    pipeline_->Finish();
    std::vector<int32_t> failed = pipeline_->TakeFailedBlocks();  // sorted
    absl::MutexLock lock(&mu_);
    for (TransferSpec& spec : job.specs) {
      // The blocks an asynchronous load writes are its request's own: a failed one is this
      // request's.
      const std::span<const int32_t> written = LoadedBlocks(spec, block_size_);
      const bool spec_failed = std::any_of(written.begin(), written.end(), [&](int32_t block) {
        return std::binary_search(failed.begin(), failed.end(), block);
      });
      if (spec_failed) over_.failed_request_ids.push_back(spec.request_id);
      over_.request_ids.push_back(std::move(spec.request_id));
    }
    over_.failed_blocks.insert(over_.failed_blocks.end(), failed.begin(), failed.end());
    stats_ = pipeline_->stats();
  }
}

}  // namespace strata::connector::internal
