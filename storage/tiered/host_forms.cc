#include "storage/tiered/host_forms.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "core/fmt_absl.h"
#include "core/status_macros.h"
#include "core/status_util.h"
#include "fmt/format.h"
#include "storage/codec/kv_error.h"
#include "storage/tiered/chunk_codec.h"

namespace strata::storage {

void KnownLayouts::Note(const KvLayout& layout) {
  const uint64_t fingerprint = layout.Fingerprint();
  absl::MutexLock lock(&mu_);
  if (!layouts_.contains(fingerprint)) {
    layouts_.emplace(fingerprint, std::make_shared<const KvLayout>(layout));
  }
}

std::shared_ptr<const KvLayout> KnownLayouts::Find(uint64_t fingerprint) const {
  absl::MutexLock lock(&mu_);
  auto it = layouts_.find(fingerprint);
  return it == layouts_.end() ? nullptr : it->second;
}

absl::Status WithChunkBytes(
    const KnownLayouts& layouts, const ChunkKey& key, uint32_t num_tokens,
    const PayloadView& payload, uint64_t checksum, const StoredEncoding& encoding,
    absl::FunctionRef<absl::Status(const PayloadView& chunk, uint64_t chunk_checksum)> use) {
  if (!encoding.encoded()) return use(payload, checksum);
  const std::shared_ptr<const KvLayout> layout = layouts.Find(key.layout_fingerprint());
  if (layout == nullptr) {
    return absl::DataLossError(fmt::format(
        "host chunk {} is encoded for a layout this daemon does not know", key.ToString()));
  }
  absl::StatusOr<std::vector<std::byte>> chunk =
      DecodePayload(*layout, num_tokens, encoding, payload);
  if (!chunk.ok()) return Annotate(chunk.status(), fmt::format("host chunk {}", key.ToString()));
  const ArenaRange whole[] = {{.offset = 0, .size_bytes = chunk->size()}};
  return use(PayloadView(chunk->data(), whole, chunk->size()), encoding.decoded_checksum);
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

absl::StatusOr<std::vector<std::byte>> HostForms::Decode(const KvLayout& layout,
                                                         ChunkLease& lease) {
  absl::StatusOr<std::vector<std::byte>> chunk =
      DecodePayload(layout, lease.num_tokens(), lease.encoding(), lease.payload());
  if (chunk.ok()) return chunk;
  // Never wrong bytes: a frame that does not decode goes, and engines recompute the chunk.
  const ChunkKey key = lease.key();
  lease.Release();
  (void)host_.Remove(key);
  return Annotate(chunk.status(),
                  fmt::format("host chunk {} (removed) does not decode", key.ToString()));
}

absl::StatusOr<LowerTier::RecodeResult> HostForms::RecodeOnce(
    const ChunkKey& key, const LowerTier::Recoding& recoding) {
  using Outcome = LowerTier::RecodeOutcome;
  STRATA_ASSIGN_OR_RETURN(std::optional<ChunkLease> lease,
                          host_.AcquireForCopy(key, std::nullopt, Forms::kAny));
  if (!lease.has_value()) return LowerTier::RecodeResult{.outcome = Outcome::kMissing};
  LowerTier::RecodeResult result{.outcome = Outcome::kAlreadyInForm,
                                 .stored_bytes_before = lease->size_bytes(),
                                 .stored_bytes_after = lease->size_bytes()};
  const bool encode = recoding.codec != nullptr;
  if (encode == lease->encoding().encoded()) return result;
  if (recoding.layout != nullptr && recoding.layout->Fingerprint() == key.layout_fingerprint()) {
    layouts_.Note(*recoding.layout);
  }
  const std::shared_ptr<const KvLayout> layout = layouts_.Find(key.layout_fingerprint());
  const uint64_t chunk_bytes = encode ? lease->size_bytes() : lease->encoding().decoded_bytes;
  if (layout == nullptr || layout->chunk_bytes(lease->num_tokens()) != chunk_bytes) {
    result.outcome = Outcome::kNoLayout;
    return result;
  }
  absl::Status replaced;
  if (encode) {
    std::vector<std::byte> chunk(chunk_bytes);
    std::vector<std::byte> decoded(chunk_bytes);
    lease->payload().CopyTo(chunk);
    absl::StatusOr<std::optional<EncodedChunk>> frame = EncodeChunk(
        *recoding.codec, recoding.params, *layout, lease->num_tokens(), chunk, decoded);
    if (!frame.ok()) {
      return Annotate(frame.status(),
                      fmt::format("codec {} on host chunk {} (layout {})", recoding.codec->name(),
                                  key.ToString(), layout->DebugString()));
    }
    if (!frame->has_value()) {
      result.outcome = Outcome::kNotSmaller;
      return result;
    }
    result.error = CompareKv(layout->dtype, chunk, decoded);
    KeepError(result.error, (*frame)->encoding);
    replaced = host_.ReplaceForm(*lease, (*frame)->frame, (*frame)->encoding);
  } else {
    STRATA_ASSIGN_OR_RETURN(std::vector<std::byte> chunk, Decode(*layout, *lease));
    replaced = host_.ReplaceForm(*lease, chunk, StoredEncoding{});
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
    return absl::DataLossError(fmt::format(
        "host chunk {} (removed) is encoded for a layout this daemon does not know",
        key.ToString()));
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<std::byte> chunk, Decode(*layout, *lease));
  absl::Status replaced = host_.ReplaceForm(*lease, chunk, StoredEncoding{});
  // Removed or evicted meanwhile: the load finds it gone.
  if (replaced.code() == absl::StatusCode::kAborted) return absl::OkStatus();
  return replaced;
}

}  // namespace strata::storage
