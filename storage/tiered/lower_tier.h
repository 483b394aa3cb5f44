// LowerTier is what a tier below the host tier implements to join a TieredStore (DESIGN.md
// section 4, "Composition"): the disk tier through DiskLowerTier (disk_lower_tier.h), the
// remote tier next. The store's movers speak to it alone: the Demoter writes the host tier's
// evictions to it, promotions read its chunks straight into host reservations, write-through
// copies commits to it, and operators' moves and clears reach it through the store. Adding a tier
// means implementing this interface and registering the tier with the store; nothing above
// storage/tiered/ changes.
//
// Contract every implementation keeps:
//   - Thread-safety: every method is thread-safe; the store calls them from its own threads,
//     the evicting threads (Demoter) and the session thread (Lookup only).
//   - Lookup answers from memory, never waiting for I/O: the session thread calls it on every
//     engine Lookup. Everything else may block on I/O.
//   - Never wrong bytes: ReadBatch checks each chunk's payload against its checksum as it reads
//     and fails the chunk (kDataLoss, the record dropped) when they differ.
//   - PutBatch keeps a chunk invisible to Lookup until its bytes are durable in the tier; a
//     failed put leaves nothing visible. Chunks are content-addressed: a put of a key the tier
//     holds already stores the same bytes.
//   - Memory passed to PutBatch and ReadBatch is the caller's, only for the call.
//   - A tier whose index lives elsewhere (the remote tier: peers' chunks) learns of chunks by
//     asking (Discover), within its own time budget, off the caller's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/chunk_key.h"
#include "core/kv_layout.h"
#include "storage/codec/codec.h"
#include "storage/codec/kv_error.h"
#include "storage/host/host_tier.h"
#include "storage/tiered/tier.h"

namespace strata::storage {

class LowerTier {
 public:
  // A payload in pieces (host arena pages), in order.
  using ConstParts = std::span<const std::span<const std::byte>>;
  using MutableParts = std::span<const std::span<std::byte>>;

  // What the tier knows of a chunk it holds.
  struct ChunkInfo {
    uint64_t payload_bytes = 0;
    uint64_t payload_checksum = 0;  // xxh3-64 of the payload
    uint32_t num_tokens = 0;
    // How the tier stores it: its bytes there (below payload_bytes when encoded) and the codec
    // it is encoded with (nullopt: as it is).
    uint64_t stored_bytes = 0;
    std::optional<CodecId> codec;
    // The encoded form's error as measured when it was encoded (Recode, a codec's write);
    // nullopt when not measured.
    std::optional<KvError> error;
    // The tenant that stored it (Put::tenant), in a tier that records_tenants(); "" otherwise.
    std::string tenant;
  };

  // One chunk to store: its key (whose layout fingerprint it is filed under), its payload, the
  // payload's checksum as the host tier recorded it, its token count.
  struct Put {
    ChunkKey key;
    ConstParts payload;
    uint64_t payload_checksum = 0;
    uint32_t num_tokens = 0;
    // The tenant the host tier stored the chunk under ("" for none): a tier may store tenants'
    // chunks differently (DiskEncodingOptions::codecs), and one that records_tenants() keeps
    // it for ChunkInfo::tenant and ListOptions::tenant.
    std::string_view tenant;
  };

  // Which chunks List reports, and from where.
  struct ListOptions {
    // Resume after this key (a ListPage's resume_after); nullopt: from the first chunk.
    std::optional<ChunkKey> after;
    // Chunks examined: a page holds at most this many (fewer when some are filtered out). >= 1.
    uint32_t limit = 100;
    uint64_t layout_fingerprint = 0;  // 0: every layout
    // Only the chunks this tenant stored ("" is no tenant's); nullopt: every one. Only for a
    // tier that records_tenants().
    std::optional<std::string> tenant;
  };
  struct ListedChunk {
    ChunkKey key;
    ChunkInfo info;
  };
  struct ListPage {
    std::vector<ListedChunk> chunks;       // in the tier's key order
    std::optional<ChunkKey> resume_after;  // nullopt: the listing is complete
  };

  // How Recode stores a chunk: encoded by `codec` with `params`, or, with no codec, as it is.
  struct Recoding {
    const Codec* codec = nullptr;  // from CodecRegistry; not owned
    CodecParams params;
    // The chunks' layout when the caller knows it (a selector's), for a tier that does not keep
    // it; nullable; a chunk of another layout ignores it.
    const KvLayout* layout = nullptr;
  };
  enum class RecodeOutcome {
    kRecoded,
    kAlreadyInForm,  // encoded already (by any codec) for an encoding; as it is for a decoding
    kMissing,        // not in the tier, or removed or changed while it was recoded
    kNotSmaller,     // the codec's frame would not shrink it: left as it was
    kNoLayout,       // its layout is unknown to the tier and was not given (or its size is not the
                     // layout's for its tokens): left as it was
    kBusy,           // the host tier only: readers held it throughout (HostForms): left as it was
    kNoImportance,   // the host tier only: drop_h2o, and no engine reported the importance of
                     // the chunk's tokens (ImportanceBook): left as it was
  };
  struct RecodeResult {
    RecodeOutcome outcome = RecodeOutcome::kMissing;
    // Bytes the chunk took in the tier before and after (equal unless recoded).
    uint64_t stored_bytes_before = 0;
    uint64_t stored_bytes_after = 0;
    // The new form as it decodes against the chunk as it decoded before (an encoded chunk is
    // encoded again only after a decoding, so against its first decoded form); 0 for a decoding,
    // which is exact.
    KvError error;
  };

  virtual ~LowerTier() = default;

  // Which tier this is (its name in stats, metrics and the control API).
  virtual Tier tier() const = 0;

  // The chunk when the tier holds it; in memory only.
  virtual std::optional<ChunkInfo> Lookup(const ChunkKey& key) const = 0;
  // Whether the tier holds the chunk; in memory only. The engines' lookups ask it per key, so a
  // tier may answer it without building the chunk's description (the default does).
  virtual bool Contains(const ChunkKey& key) const { return Lookup(key).has_value(); }

  // One page of the chunks the tier holds, in an order of keys the tier fixes: paging from
  // nullopt until resume_after is nullopt visits every chunk held throughout once; chunks stored
  // or removed meanwhile may or may not appear. kFailedPrecondition for a tier that holds no list
  // of its own (the remote tier: its chunks are its peers') or, given a tenant, records none;
  // kInvalidArgument for a zero limit.
  virtual absl::StatusOr<ListPage> List(const ListOptions& options) const = 0;

  // Whether the tier keeps the tenant each chunk was put under (the disk tier does); false by
  // default.
  virtual bool records_tenants() const { return false; }

  // Stores each chunk; one status per put, in order (kResourceExhausted: no room).
  virtual std::vector<absl::Status> PutBatch(std::span<const Put> puts) = 0;
  absl::Status PutOne(const Put& put) { return PutBatch({&put, 1}).front(); }

  // Reads each chunk's payload into its destination (exactly its payload_bytes, in pieces); one
  // status per key, in order: kAborted when the tier no longer holds it, kInvalidArgument for a
  // destination of another size, kDataLoss for bytes that fail their checksum.
  virtual std::vector<absl::Status> ReadBatch(std::span<const ChunkKey> keys,
                                              std::span<const MutableParts> destinations) = 0;

  // Removes the chunk; whether the tier held it.
  virtual absl::StatusOr<bool> Remove(const ChunkKey& key) = 0;
  // Removes every chunk whose key satisfies `predicate`; the chunks and payload bytes removed.
  virtual absl::StatusOr<RemoveResult> RemoveIf(
      absl::FunctionRef<bool(const ChunkKey&)> predicate) = 0;

  // Stores the chunk in the form `recoding` names in place of the form it has: read (decoded),
  // encoded and swapped in whole, so a concurrent read gets the old form or the new one (a
  // lossy codec's new form decodes within its bound of the old one, and Lookup then reports the
  // new form's checksum). Blocks on I/O. kInvalidArgument when the codec refuses the chunk's
  // layout or the parameters (nothing changed); kDataLoss for a chunk that does not read back
  // (dropped); kFailedPrecondition for a tier that keeps no encoded chunks (the default).
  virtual absl::StatusOr<RecodeResult> Recode(const ChunkKey& key, const Recoding& recoding);

  // Whether Discover asks anyone: false for a tier that knows its chunks itself (the default).
  virtual bool discovers() const { return false; }
  using DiscoverDone = absl::AnyInvocable<void() &&>;
  // Asks where the tier's chunks are known (peers) about `chain`, so that Lookup then finds
  // what it learnt, and calls `done` once it has an answer or its budget ran out (`budget`, or
  // the tier's own when it is 0), on a thread of its own (or at once when there is no one to
  // ask). Never blocks. Only for discovers() tiers.
  virtual void Discover(std::vector<ChunkKey> /*chain*/, std::chrono::microseconds /*budget*/,
                        DiscoverDone done) {
    std::move(done)();
  }

  // Tells the tier of a layout engines store chunks of (a session's handshake), for a tier that
  // needs the layout itself, not only its fingerprint (the disk tier, to encode chunks). Quick;
  // errors are the tier's to log. The default ignores it.
  virtual void NoteLayout(const KvLayout& /*layout*/) {}

  // Registers memory that transfers will use (the host arena), so the tier can skip pinning it
  // per request; an empty span unregisters. A refusal leaves the tier working unregistered.
  virtual absl::Status RegisterMemory(std::span<const std::span<std::byte>> regions) = 0;

  virtual LowerTierStats Stats() const = 0;
};

}  // namespace strata::storage
