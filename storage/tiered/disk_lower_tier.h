// DiskLowerTier registers the disk tier (storage/disk) with a TieredStore: the LowerTier
// interface over a DiskTier, which knows nothing of the store.
//
// Encoding ([disk] codec, per tenant [disk.tenant_codecs]: DiskEncodingOptions says which chunk
// is stored how): with a codec, a chunk written to disk whose layout the disk keeps
// (NoteLayout, DiskTier::KeepLayout) is stored as the codec's encoded frame when that is
// smaller, and decoded when it is read back, so disk holds more chunks and promotions read
// fewer bytes. Each encoded chunk's error (its decode against the chunk) is measured as it is
// written and kept with it (StoredEncoding), as Recode's is. What the store sees is the decoded
// chunk: Lookup and List report its size and the xxh3-64 of its decoded bytes (the bytes ReadBatch
// delivers, checked against it), so a promoted chunk is committed to the host tier as it decodes. A
// lossy codec's chunk comes back within the codec's bound (storage/codec), not bit-exact: the
// operator's choice. A chunk whose layout the disk does not keep, or that the codec refuses or does
// not shrink, is stored as it is. Chunks stored earlier keep their form whatever the codec now is
// (each record says its own). Recode (Compress, Decompress) changes a stored chunk's form in place,
// codec or none configured.
//
// Thread-safe as DiskTier is; the DiskTier is not owned and must outlive it. Encoding runs on the
// caller's thread (the demoter's, the store's for Recode); so does decoding, except ReadBatch's
// (promotions), which runs on the tier's decode threads too ("strata-decode").
// Encoded records are read, and Recode reads and checks a chunk, through staging buffers that are
// kept for the next ones (at most kKeptStagingBuffers, each of the largest size asked so far):
// with a codec, or once Recode ran, that memory stays allocated.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "storage/codec/codec.h"
#include "storage/codec/codec_choice.h"
#include "storage/disk/disk_tier.h"
#include "storage/io/aligned_buffer.h"
#include "storage/tiered/lower_tier.h"
#include "storage/tiered/task_pool.h"

namespace strata::storage {

// How DiskLowerTier encodes the chunks it writes ([disk] codec, [disk.tenant_codecs]): each by
// the choice `codecs` makes for the tenant the host tier stored it under.
struct DiskEncodingOptions {
  TenantCodecs codecs;
  // Threads that decode the encoded chunks a ReadBatch reads while it reads the next ones
  // ([disk] codec_threads); 0 decodes each window on the reading thread once it is read.
  uint32_t decode_threads = 0;
};

class DiskLowerTier final : public LowerTier {
 public:
  explicit DiskLowerTier(DiskTier* disk, DiskEncodingOptions encoding = {})
      : disk_(disk), encoding_(encoding), decoders_("strata-decode", encoding.decode_threads) {}

  Tier tier() const override { return Tier::kDisk; }
  std::optional<ChunkInfo> Lookup(const ChunkKey& key) const override;
  bool Contains(const ChunkKey& key) const override { return disk_->Contains(key); }
  absl::StatusOr<ListPage> List(const ListOptions& options) const override;
  bool records_tenants() const override { return true; }
  std::vector<absl::Status> PutBatch(std::span<const Put> puts) override;
  // Plain chunks are read straight into their destinations, in one batch; encoded ones through
  // staging, kEncodedReadWindow at a time, each window's chunks decoding on the decode threads
  // (DiskEncodingOptions::decode_threads, with the caller once its reads are done) while the next
  // window is read.
  std::vector<absl::Status> ReadBatch(std::span<const ChunkKey> keys,
                                      std::span<const MutableParts> destinations) override;
  absl::StatusOr<bool> Remove(const ChunkKey& key) override { return disk_->Remove(key); }
  absl::StatusOr<RemoveResult> RemoveIf(
      absl::FunctionRef<bool(const ChunkKey&)> predicate) override;
  // Keeps the layout with the disk (DiskTier::KeepLayout), codec or none. The first time a
  // layout is noted, logs a warning for each configured encoding whose codec refuses it or its
  // parameters (Codec::CheckParams): those chunks are stored as they are.
  void NoteLayout(const KvLayout& layout) override;
  // Reads the chunk decoded, encodes it (or not) and swaps the new record in (DiskTier::Replace).
  // A chunk of a layout the disk does not keep is encoded with the recoding's layout, which the
  // disk keeps from then on. On the caller's thread.
  absl::StatusOr<RecodeResult> Recode(const ChunkKey& key, const Recoding& recoding) override;
  absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions) override {
    return disk_->RegisterMemory(regions);
  }
  LowerTierStats Stats() const override;

  DiskTier& disk() const { return *disk_; }

 private:
  // Decodes `frame` (the record of `key`, read whole, described by `info`) into `destination`,
  // checking the decoded bytes against its encoding; a chunk that does not decode is dropped
  // (kDataLoss).
  absl::Status DecodeInto(const ChunkKey& key, const DiskChunkInfo& info,
                          std::span<const std::byte> frame, MutableParts destination);
  // The status of a read of `key` (described by `info` when it was looked up) into
  // `destination`, given the disk's: kInvalidArgument for a destination of the wrong size,
  // kAborted for a record that changed since its lookup.
  absl::Status Settle(const ChunkKey& key, const std::optional<DiskChunkInfo>& info,
                      MutableParts destination, absl::Status read) const;

  // A staging buffer of at least `bytes` for an encoded record's read: a kept one when one is
  // large enough (allocating and faulting in a fresh one costs more than decoding it).
  AlignedBuffer TakeStaging(uint64_t bytes);
  // Keeps `buffer` for a later read, up to kKeptStagingBuffers of them.
  void ReturnStaging(AlignedBuffer buffer);

  // What a promotion run reads at once.
  static constexpr size_t kKeptStagingBuffers = 8;
  // Encoded chunks read at once: two 17 MiB int8 frames of Llama-3-8B keep the disk's queue as
  // deep as one plain chunk does, and the decodes start after the first two.
  static constexpr size_t kEncodedReadWindow = 2;

  DiskTier* const disk_;
  const DiskEncodingOptions encoding_;
  absl::Mutex staging_mu_;
  std::vector<AlignedBuffer> staging_ ABSL_GUARDED_BY(staging_mu_);
  absl::Mutex checked_mu_;
  // Fingerprints of the layouts whose encodings NoteLayout checked.
  absl::flat_hash_set<uint64_t> checked_layouts_ ABSL_GUARDED_BY(checked_mu_);
  // Last, so destroyed first: its threads join before anything a decode uses goes.
  TaskPool decoders_;
};

}  // namespace strata::storage
