// ImportanceBook: what engines measured of position-independent chunks' tokens, for drop_h2o
// (storage/codec/token_drop_codec.h): H2O's importance, the attention each token of a chunk
// received, one value per token of the chunk (its padded span). Engines report it through their
// session (engine.proto's PoolImportanceRequest) as often as they measure it; the reports of a
// chunk are summed (H2O accumulates attention over queries). Compress with drop_h2o reads it
// (HostForms), so the heavy hitters it keeps are the ones engines saw.
//
// Bounded: past max_chunks chunks or max_values values (4 bytes each) in all, the chunks reported
// least recently are forgotten (a chunk with no importance is left whole by drop_h2o, never
// thinned blindly). Not persisted: a restart forgets it, and engines report again.
//
// Thread-safety: every method is thread-safe (one mutex; Add and Find are O(tokens)).
// Ownership: holds copies of the reports.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"

namespace strata::storage {

class ImportanceBook {
 public:
  static constexpr size_t kDefaultMaxChunks = size_t{1} << 16;
  static constexpr size_t kDefaultMaxValues = size_t{1} << 24;  // 64 MiB
  // Reports longer than this many tokens are refused (a chunk is a passage, not a corpus).
  static constexpr size_t kMaxTokens = size_t{1} << 20;

  explicit ImportanceBook(size_t max_chunks = kDefaultMaxChunks,
                          size_t max_values = kDefaultMaxValues)
      : max_chunks_(max_chunks), max_values_(max_values) {}

  // Adds a report for `key`: one finite, non-negative value per token of the chunk, summed into
  // what the book holds for it when it holds as many tokens (each sum saturating at the largest
  // float, so what Find returns is always finite), replacing it otherwise (the chunk's
  // length cannot change under its key, so a different length is a fresh start). The chunk
  // becomes the most recently reported. kInvalidArgument (nothing changes) for an empty key, an
  // empty report or one over kMaxTokens, or a value that is negative, a NaN or infinite.
  absl::Status Add(const ChunkKey& key, std::span<const float> importance);
  // Add of reports[i] for keys[i], all or none: every report is checked before any is kept
  // (kInvalidArgument, nothing changes, for a bad one or counts that differ).
  absl::Status AddAll(std::span<const ChunkKey> keys,
                      std::span<const std::span<const float>> reports);

  // The summed reports of `key`; nullopt when none (or forgotten).
  std::optional<std::vector<float>> Find(const ChunkKey& key) const;

  size_t size() const;
  // The values held, over every chunk.
  size_t values() const;

 private:
  struct Entry {
    std::vector<float> importance;
    std::list<ChunkKey>::iterator recency;
  };

  // Sums `importance` into what the book holds for `key` (checked), then forgets the least
  // recently reported past the bounds.
  void AddLocked(const ChunkKey& key, std::span<const float> importance)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t max_chunks_;
  const size_t max_values_;
  mutable absl::Mutex mu_;
  size_t values_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<ChunkKey, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::list<ChunkKey> recency_ ABSL_GUARDED_BY(mu_);  // least recently reported first
};

}  // namespace strata::storage
