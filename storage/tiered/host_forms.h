// The daemon's side of the host tier's encoded chunks (HostTier's forms: a committed chunk
// stored as a codec's frame in place of its plain bytes):
//   - KnownLayouts: the KV layouts engines announced (TieredStore::NoteLayout) or operators named
//     (a Compress selector's), by fingerprint: what encodes and decodes a host chunk needs.
//   - HostForms::Recode: Compress and Decompress of one host chunk (LowerTier::Recode's
//     outcomes, plus kBusy: engines read the chunk throughout the retries).
//   - HostForms::DecodeInPlace: an encoded chunk put back in plain form, before a load leases it.
//   - WithChunkBytes, DecodeHostChunk: a host chunk as the chunk, for what copies it below (the
//     demoter, CopyDown, write-through): tiers below are given plain chunks, never the host
//     tier's frames.
//
// Thread-safety: every method and function is thread-safe. HostForms' calls block (codec work,
// and up to kBusyTries tries kBusyWait apart while other leases read a chunk: each try leases the
// chunk anew, so two of them on one chunk never hold each other off); never call them from an
// EvictionListener callback (ReplaceForm may evict). Ownership: HostForms refers to the host
// tier and the layouts, which must outlive it; KnownLayouts never forgets a layout (an engine's
// are few).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "core/stored_encoding.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/importance_book.h"
#include "storage/tiered/lower_tier.h"

namespace strata::storage {

// At most this many layouts are known: a daemon serves a few models, and an engine that keeps
// announcing new layouts must not grow the daemon's memory without bound.
inline constexpr size_t kMaxKnownLayouts = 1024;

class KnownLayouts {
 public:
  // kResourceExhausted when kMaxKnownLayouts others are known already.
  absl::Status Note(const KvLayout& layout);
  // The layout of `fingerprint`; null when none was noted.
  std::shared_ptr<const KvLayout> Find(uint64_t fingerprint) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::shared_ptr<const KvLayout>> layouts_ ABSL_GUARDED_BY(mu_);
};

// Calls `use(chunk, chunk_checksum)` with the host chunk `key` (`payload`, of `num_tokens`
// tokens, in `encoding`'s form, committed with `checksum`) as the chunk: `payload` and
// `checksum` themselves when plain; else DecodeHostChunk's (into scratch the calling thread
// keeps for its next chunk) and encoding.decoded_checksum.
// DecodeHostChunk's errors; else `use`'s status.
absl::Status WithChunkBytes(
    const KnownLayouts& layouts, const ChunkKey& key, uint32_t num_tokens,
    const PayloadView& payload, uint64_t checksum, const StoredEncoding& encoding,
    absl::FunctionRef<absl::Status(const PayloadView& chunk, uint64_t chunk_checksum)> use);

// The host chunk `key` (`payload`, of `num_tokens` tokens, in `encoding`'s encoded form) as it
// decodes, with the layout `layouts` knows for it: the first encoding.decoded_bytes of `out`
// (grown to fit). kDataLoss when it does not decode or its layout is unknown.
absl::StatusOr<std::span<const std::byte>> DecodeHostChunk(const KnownLayouts& layouts,
                                                           const ChunkKey& key, uint32_t num_tokens,
                                                           const StoredEncoding& encoding,
                                                           const PayloadView& payload,
                                                           std::vector<std::byte>& out);

class HostForms {
 public:
  // A recode or decode that finds other leases on the chunk is tried this many times, this far
  // apart, before the chunk counts as busy.
  static constexpr int kBusyTries = 10;
  static constexpr std::chrono::milliseconds kBusyWait{10};

  // drop_h2o's Recode reads `importance` (each chunk's, as engines reported it).
  HostForms(HostTier& host, KnownLayouts& layouts, const ImportanceBook& importance)
      : host_(host), layouts_(layouts), importance_(importance) {}

  // Stores the host chunk `key` in the form `recoding` names (LowerTier::Recode's contract for
  // the host tier; the selector's layout, when given, is noted in KnownLayouts): encoded in place
  // of its plain form, or plain in place of its frame. Outcomes as LowerTier's, plus kBusy when
  // other leases read the chunk through every retry (it is left as it was), and kNoImportance for
  // drop_h2o when `importance` holds none of the chunk's tokens (as many as it has).
  // kInvalidArgument when the codec refuses the layout or parameters; kDataLoss for an encoded
  // chunk that does not decode (it is removed); kResourceExhausted when the tier has no room for
  // the new form.
  absl::StatusOr<LowerTier::RecodeResult> Recode(const ChunkKey& key,
                                                 const LowerTier::Recoding& recoding);

  // Puts the host chunk `key` back in plain form when it is encoded, so Acquire (Forms::
  // kPlainOnly) finds it. OK when it is plain now or is gone; kDataLoss when it does not decode
  // (it is removed: the engine recomputes it); kFailedPrecondition for a chunk a token-dropping
  // codec thinned (the device pool's: it stays, and a load stops at it); kUnavailable when busy
  // through the retries; kResourceExhausted when the tier has no room for the decoded chunk.
  absl::Status DecodeInPlace(const ChunkKey& key);

 private:
  // One try of Recode and of DecodeInPlace (kBusy, kUnavailable: other leases read the chunk).
  absl::StatusOr<LowerTier::RecodeResult> RecodeOnce(const ChunkKey& key,
                                                     const LowerTier::Recoding& recoding);
  absl::Status DecodeOnce(const ChunkKey& key);
  // Stores the chunk an encoded `lease` (its only one) reads as it decodes, decoded straight
  // into fresh pages (HostTier::ReplaceForm's errors); one that does not decode is removed
  // (kDataLoss). A chunk a token-dropping codec thinned is kFailedPrecondition, and stays.
  absl::Status DecodeLeased(const KvLayout& layout, ChunkLease& lease);

  HostTier& host_;
  KnownLayouts& layouts_;
  const ImportanceBook& importance_;
};

}  // namespace strata::storage
