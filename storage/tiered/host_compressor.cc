#include "storage/tiered/host_compressor.h"

#include <utility>

#include "core/fmt_absl.h"
#include "spdlog/spdlog.h"

namespace strata::storage {

absl::StatusOr<std::unique_ptr<HostCompressor>> HostCompressor::Create(
    const HostCompressorOptions& options) {
  if (!options.codecs.any()) {
    return absl::InvalidArgumentError("host compressor: no codec for any chunk");
  }
  if (options.max_queued_chunks == 0) {
    return absl::InvalidArgumentError("host compressor: max_queued_chunks must be positive");
  }
  return std::unique_ptr<HostCompressor>(new HostCompressor(options));
}

HostCompressor::HostCompressor(const HostCompressorOptions& options)
    : options_(options),
      worker_({.thread_name = "strata-hcompress",
               .max_batch = 1,
               .max_queued = options.max_queued_chunks,
               .on_stop = BackgroundWorkerOptions::OnStop::kDropQueued,  // best effort
               .nice = kBackgroundNice},
              [this](std::span<ChunkKey> keys) {
                for (const ChunkKey& key : keys) Compress(key);
              }) {}

HostCompressor::~HostCompressor() { Stop(); }

void HostCompressor::Start(HostForms* forms, const HostTier* host) {
  absl::MutexLock lock(&mu_);
  if (forms_ == nullptr && !stopping_) {
    forms_ = forms;
    host_ = host;
  }
}

void HostCompressor::OnStored(const ChunkKey& key, const ChunkKey& /*parent*/,
                              uint32_t /*num_tokens*/, std::span<const uint32_t> /*token_ids*/) {
  absl::MutexLock lock(&mu_);
  if (forms_ == nullptr || stopping_) return;
  ChunkKey queued = key;
  if (!worker_.Push(std::move(queued))) dropped_.fetch_add(1, std::memory_order_relaxed);
}

void HostCompressor::OnCleared() { worker_.DropQueued(); }

void HostCompressor::Flush() { worker_.Flush(); }

void HostCompressor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  worker_.Stop();
}

HostCompressorStats HostCompressor::Stats() const {
  return {.queued = worker_.pushed(),
          .compressed = compressed_.load(std::memory_order_relaxed),
          .busy = busy_.load(std::memory_order_relaxed),
          .skipped = skipped_.load(std::memory_order_relaxed),
          .failed = failed_.load(std::memory_order_relaxed),
          .dropped = dropped_.load(std::memory_order_relaxed),
          .pending = worker_.pending()};
}

void HostCompressor::Compress(const ChunkKey& key) {
  HostForms* forms = nullptr;
  const HostTier* host = nullptr;
  {
    absl::MutexLock lock(&mu_);
    forms = forms_;
    host = host_;
  }
  const CodecChoice& choice = options_.codecs.For(host->TenantOf(key));
  if (choice.codec == nullptr) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  absl::StatusOr<LowerTier::RecodeResult> result =
      forms->Recode(key, {.codec = choice.codec, .params = choice.params});
  if (!result.ok()) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("host compressor: chunk {} left as it is: {}", key.ToString(), result.status());
    return;
  }
  switch (result->outcome) {
    case LowerTier::RecodeOutcome::kRecoded:
      compressed_.fetch_add(1, std::memory_order_relaxed);
      break;
    case LowerTier::RecodeOutcome::kBusy:
      busy_.fetch_add(1, std::memory_order_relaxed);
      break;
    default:
      skipped_.fetch_add(1, std::memory_order_relaxed);
      break;
  }
}

}  // namespace strata::storage
