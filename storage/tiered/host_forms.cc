#include "storage/tiered/host_forms.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/codec/codec_registry.h"
#include "storage/codec/kv_error.h"
#include "storage/tiered/chunk_codec.h"

namespace strata::storage {
namespace {

// Scratch kept by each thread that recodes host chunks (the recode threads, the loads thread)
// or decodes them for a copy below (the evicting threads, for the demoter; Move; write-through)
// for its next chunk: buffers of the largest chunk it met. A fresh chunk-sized buffer costs
// more to fault in (12-15 us a 4 KiB page on the dev VM) than the codec takes to fill it. A
// copy's buffers are not a recode's: a decode in place may evict, and so decode a victim for
// the demoter, on the same thread while its frame is gathered in the recode's.
enum class ScratchUse { kRecodeGathered, kRecodeDecoded, kCopyGathered, kCopyDecoded };
std::vector<std::byte>& Scratch(ScratchUse use) {
  thread_local std::vector<std::byte> buffers[4];
  return buffers[static_cast<int>(use)];
}

}  // namespace

absl::Status KnownLayouts::Note(const KvLayout& layout) {
  const uint64_t fingerprint = layout.Fingerprint();
  absl::MutexLock lock(&mu_);
  if (layouts_.contains(fingerprint)) return absl::OkStatus();
  if (layouts_.size() >= kMaxKnownLayouts) {
    return absl::ResourceExhaustedError(
        fmt::format("the daemon knows {} KV layouts already, its most; layout {:016x} is not taken",
                    layouts_.size(), fingerprint));
  }
  layouts_.emplace(fingerprint, std::make_shared<const KvLayout>(layout));
  return absl::OkStatus();
}

std::shared_ptr<const KvLayout> KnownLayouts::Find(uint64_t fingerprint) const {
  absl::MutexLock lock(&mu_);
  auto it = layouts_.find(fingerprint);
  return it == layouts_.end() ? nullptr : it->second;
}

absl::StatusOr<std::span<const std::byte>> DecodeHostChunk(const KnownLayouts& layouts,
                                                           const ChunkKey& key, uint32_t num_tokens,
                                                           const StoredEncoding& encoding,
                                                           const PayloadView& payload,
                                                           std::vector<std::byte>& out) {
  const std::shared_ptr<const KvLayout> layout = layouts.Find(key.layout_fingerprint());
  if (layout == nullptr) {
    return absl::DataLossError(fmt::format(
        "host chunk {} is encoded for a layout this daemon does not know", key.ToString()));
  }
  absl::StatusOr<std::span<const std::byte>> chunk = DecodePayload(
      *layout, num_tokens, encoding, payload, Scratch(ScratchUse::kCopyGathered), out);
  if (!chunk.ok()) return Annotate(chunk.status(), fmt::format("host chunk {}", key.ToString()));
  return chunk;
}

absl::Status WithChunkBytes(
    const KnownLayouts& layouts, const ChunkKey& key, uint32_t num_tokens,
    const PayloadView& payload, uint64_t checksum, const StoredEncoding& encoding,
    absl::FunctionRef<absl::Status(const PayloadView& chunk, uint64_t chunk_checksum)> use) {
  if (!encoding.encoded()) return use(payload, checksum);
  STRATA_ASSIGN_OR_RETURN(const std::span<const std::byte> chunk,
                          DecodeHostChunk(layouts, key, num_tokens, encoding, payload,
                                          Scratch(ScratchUse::kCopyDecoded)));
  const ArenaRange whole[] = {{.offset = 0, .size_bytes = chunk.size()}};
  return use(PayloadView(chunk.data(), whole, chunk.size()), encoding.decoded_checksum);
}

absl::StatusOr<LowerTier::RecodeResult> HostForms::Recode(const ChunkKey& key,
                                                          const LowerTier::Recoding& recoding) {
  for (int attempt = 1;; ++attempt) {
    absl::StatusOr<LowerTier::RecodeResult> result = RecodeOnce(key, recoding);
    if (!result.ok() || result->outcome != LowerTier::RecodeOutcome::kBusy ||
        attempt == kBusyTries) {
      return result;
    }
    absl::SleepFor(absl::FromChrono(kBusyWait));
  }
}

absl::Status HostForms::DecodeInPlace(const ChunkKey& key) {
  for (int attempt = 1;; ++attempt) {
    absl::Status status = DecodeOnce(key);
    if (status.code() != absl::StatusCode::kUnavailable || attempt == kBusyTries) return status;
    absl::SleepFor(absl::FromChrono(kBusyWait));
  }
}

absl::Status HostForms::DecodeLeased(const KvLayout& layout, ChunkLease& lease) {
  const StoredEncoding encoding = lease.encoding();  // the lease reads the new form on success
  absl::StatusOr<const Codec*> codec = CodecRegistry::Find(static_cast<CodecId>(encoding.codec));
  if (codec.ok() && (*codec)->drops_tokens()) {
    // Thinned for the device pool: it is whole nowhere, and stays (a load stops at it).
    return absl::FailedPreconditionError(
        fmt::format("host chunk {} holds only the tokens codec {} kept: no load can have it whole",
                    lease.key().ToString(), (*codec)->name()));
  }
  absl::Status status = codec.status();
  if (codec.ok()) {
    const std::span<const std::byte> frame =
        Contiguous(lease.payload(), Scratch(ScratchUse::kRecodeGathered));
    // Decoded straight into the fresh pages, layer by layer, checked as it goes.
    status = host_.ReplaceForm(lease, encoding.decoded_bytes, encoding.decoded_checksum,
                               StoredEncoding{}, [&](const MutablePayloadView& pages) {
                                 return DecodeChunk(**codec, layout, lease.num_tokens(), encoding,
                                                    frame, Pieces(pages));
                               });
  }
  if (status.code() != absl::StatusCode::kDataLoss &&
      status.code() != absl::StatusCode::kInvalidArgument) {
    return status;
  }
  // Never wrong bytes: a frame that does not decode goes, and engines recompute the chunk.
  const ChunkKey key = lease.key();
  lease.Release();
  (void)host_.Remove(key);
  return absl::DataLossError(
      fmt::format("host chunk {} (removed) does not decode: {}", key.ToString(), status));
}

absl::StatusOr<LowerTier::RecodeResult> HostForms::RecodeOnce(const ChunkKey& key,
                                                              const LowerTier::Recoding& recoding) {
  using Outcome = LowerTier::RecodeOutcome;
  STRATA_ASSIGN_OR_RETURN(std::optional<ChunkLease> lease,
                          host_.AcquireForCopy(key, std::nullopt, Forms::kAny));
  if (!lease.has_value()) return LowerTier::RecodeResult{.outcome = Outcome::kMissing};
  LowerTier::RecodeResult result{.outcome = Outcome::kAlreadyInForm,
                                 .stored_bytes_before = lease->size_bytes(),
                                 .stored_bytes_after = lease->size_bytes()};
  const bool encode = recoding.codec != nullptr;
  if (encode == lease->encoding().encoded()) return result;
  if (!encode) {
    const absl::StatusOr<const Codec*> held =
        CodecRegistry::Find(static_cast<CodecId>(lease->encoding().codec));
    if (held.ok() && (*held)->drops_tokens()) {
      return absl::FailedPreconditionError(fmt::format(
          "host chunk {} holds only the tokens codec {} kept: the dropped ones cannot be "
          "restored (Remove the chunk to have it recomputed whole)",
          key.ToString(), (*held)->name()));
    }
  }
  if (host_.CheckReplaceable(*lease).code() == absl::StatusCode::kUnavailable) {
    result.outcome = Outcome::kBusy;  // read by an engine: no encode only to be refused
    return result;
  }
  if (recoding.layout != nullptr && recoding.layout->Fingerprint() == key.layout_fingerprint()) {
    // Known layouts full: the layout stays unknown, answered as kNoLayout below.
    (void)layouts_.Note(*recoding.layout);
  }
  const std::shared_ptr<const KvLayout> layout = layouts_.Find(key.layout_fingerprint());
  const uint64_t chunk_bytes = encode ? lease->size_bytes() : lease->encoding().decoded_bytes;
  if (layout == nullptr || layout->chunk_bytes(lease->num_tokens()) != chunk_bytes) {
    result.outcome = Outcome::kNoLayout;
    return result;
  }
  absl::Status replaced;
  if (encode) {
    // drop_h2o keeps the blocks engines found heaviest: without their report, the chunk stays.
    CodecParams params = recoding.params;
    std::optional<std::vector<float>> importance;
    if (recoding.codec->id() == CodecId::kDropH2o) {
      importance = importance_.Find(key);
      if (!importance.has_value() || importance->size() != lease->num_tokens()) {
        result.outcome = Outcome::kNoImportance;
        return result;
      }
      params.importance = *importance;
    }
    const std::span<const std::byte> chunk =
        Contiguous(lease->payload(), Scratch(ScratchUse::kRecodeGathered));
    std::vector<std::byte>& decoding = Scratch(ScratchUse::kRecodeDecoded);
    if (decoding.size() < chunk_bytes) decoding.resize(chunk_bytes);
    const std::span<std::byte> decoded(decoding.data(), chunk_bytes);
    absl::StatusOr<std::optional<EncodedForm>> frame =
        EncodeChunk(*recoding.codec, params, *layout, lease->num_tokens(), chunk, decoded);
    if (!frame.ok()) {
      return Annotate(frame.status(),
                      fmt::format("codec {} on host chunk {} (layout {})", recoding.codec->name(),
                                  key.ToString(), layout->DebugString()));
    }
    if (!frame->has_value()) {
      result.outcome = Outcome::kNotSmaller;
      return result;
    }
    // Dropped tokens have no decoded value to compare: the error of a thinned chunk is its
    // attention output's (codec_bench), not kept here.
    if (!recoding.codec->drops_tokens()) {
      result.error = CompareKv(layout->dtype, chunk, decoded);
      KeepError(result.error, (*frame)->encoding);
    }
    replaced = host_.ReplaceForm(*lease, (*frame)->frame, (*frame)->encoding);
  } else {
    replaced = DecodeLeased(*layout, *lease);
    if (replaced.code() == absl::StatusCode::kDataLoss) return replaced;
  }
  switch (replaced.code()) {
    case absl::StatusCode::kOk:
      result.outcome = Outcome::kRecoded;
      result.stored_bytes_after = lease->size_bytes();
      return result;
    case absl::StatusCode::kUnavailable:
      result.outcome = Outcome::kBusy;
      result.error = {};
      return result;
    case absl::StatusCode::kAborted:  // removed or evicted meanwhile
      return LowerTier::RecodeResult{.outcome = Outcome::kMissing};
    default:
      return replaced;
  }
}

absl::Status HostForms::DecodeOnce(const ChunkKey& key) {
  STRATA_ASSIGN_OR_RETURN(std::optional<ChunkLease> lease,
                          host_.AcquireForCopy(key, std::nullopt, Forms::kAny));
  if (!lease.has_value() || !lease->encoding().encoded()) return absl::OkStatus();
  const std::shared_ptr<const KvLayout> layout = layouts_.Find(key.layout_fingerprint());
  if (layout == nullptr) {
    lease->Release();
    (void)host_.Remove(key);
    return absl::DataLossError(
        fmt::format("host chunk {} (removed) is encoded for a layout this daemon does not know",
                    key.ToString()));
  }
  absl::Status replaced = DecodeLeased(*layout, *lease);
  // Removed or evicted meanwhile: the load finds it gone.
  if (replaced.code() == absl::StatusCode::kAborted) return absl::OkStatus();
  return replaced;
}

}  // namespace strata::storage
