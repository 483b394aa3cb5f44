// HostCompressor compresses the chunks the host tier commits, in the background ([host] codec,
// [host.tenant_codecs]): each is stored encoded in place (HostForms::Recode, what Compress of the
// host tier runs), so the tier holds more chunks in the same DRAM. Loads decode them back in
// place first (TieredStore::AcquireForLoad), which costs a decode per load: the trade an
// operator makes by turning it on.
//
// OnStored, a ChunkObserver call made under the host tier's lock, only queues the key. The thread
// "strata-hcompress" takes keys one at a time and recodes each chunk with the codec its tenant's
// choice names (TenantCodecs::For; a chunk of a tenant whose choice is no codec is left as it
// is). Best effort: a chunk engines are reading (busy), gone, of a layout no engine announced,
// that the codec would not shrink, or whose recode failed is left as it is (counted); a key that
// finds the queue full is dropped (counted). Promotions are commits too: a chunk promoted from a
// lower tier is compressed again.
//
// Lifetime: Start binds the host tier's forms; keys stored before it are not queued. Stop() (also
// run by the destructor) drops the queue, waits for the chunk in progress and joins. HostForms
// and its host tier must be alive from Start to Stop; the compressor (an observer) must outlive
// the host tier's calls to it.
//
// Thread-safety: every method is thread-safe. Lock order: the host tier's lock, then mu_
// (observer calls); the thread never calls the host tier while holding mu_.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "storage/codec/codec_choice.h"
#include "storage/host/chunk_observer.h"
#include "storage/tiered/background_worker.h"
#include "storage/tiered/host_forms.h"

namespace strata::storage {

struct HostCompressorOptions {
  // The codec each committed chunk is compressed with, by the tenant it was stored under.
  TenantCodecs codecs;
  // Most keys waiting for their turn; a commit past it is dropped (counted). At least 1.
  uint32_t max_queued_chunks = 4096;
};

struct HostCompressorStats {
  uint64_t queued = 0;      // keys ever queued
  uint64_t compressed = 0;  // chunks stored encoded
  // Left as they were: engines read them throughout (busy); gone or encoded already; of no
  // known layout, or not smaller encoded; their tenant's choice is no codec.
  uint64_t busy = 0;
  uint64_t skipped = 0;
  uint64_t failed = 0;   // the recode failed (its error is logged)
  uint64_t dropped = 0;  // found the queue full
  uint64_t pending = 0;  // queued or in progress now
};

class HostCompressor final : public ChunkObserver {
 public:
  // kInvalidArgument for no codec at all in `options.codecs` or a zero queue.
  static absl::StatusOr<std::unique_ptr<HostCompressor>> Create(
      const HostCompressorOptions& options);
  ~HostCompressor() override;
  HostCompressor(const HostCompressor&) = delete;
  HostCompressor& operator=(const HostCompressor&) = delete;

  // Starts compressing the commits of the tier `forms` recodes (not null). Once only.
  void Start(HostForms* forms, const HostTier* host);

  void OnStored(const ChunkKey& key, const ChunkKey& parent, uint32_t num_tokens,
                std::span<const uint32_t> token_ids) override;
  void OnRemoved(const ChunkKey& /*key*/, RemovalCause /*cause*/) override {}
  void OnCleared() override;

  // Returns once every key queued before the call is compressed or left as it is.
  void Flush();
  // Drops the queue, waits for the chunk in progress and joins the thread. Idempotent.
  void Stop();

  HostCompressorStats Stats() const;

 private:
  explicit HostCompressor(const HostCompressorOptions& options);
  void Compress(const ChunkKey& key);

  const HostCompressorOptions options_;

  mutable absl::Mutex mu_;
  HostForms* forms_ ABSL_GUARDED_BY(mu_) = nullptr;  // set once by Start
  const HostTier* host_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<uint64_t> compressed_{0};
  std::atomic<uint64_t> busy_{0};
  std::atomic<uint64_t> skipped_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> dropped_{0};

  // Last: stopped before the members its callback uses go.
  BackgroundWorker<ChunkKey> worker_;
};

}  // namespace strata::storage
