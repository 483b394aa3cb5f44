#include "storage/host/payload_view.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>
#if defined(__x86_64__)
// libxxhash's dispatching entry points pick the widest vector unit (SSE2, AVX2, AVX-512) at run
// time; code compiled here would be limited to the build's baseline (SSE2), about half as fast
// on megabyte payloads.
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>
#define STRATA_XXH3(fn) fn##_dispatch
#else
#define STRATA_XXH3(fn) fn
#endif

#include <cstring>

#include "core/check.h"

namespace strata::storage {

uint64_t ChecksumBytes(std::span<const std::byte> bytes) {
  return STRATA_XXH3(XXH3_64bits)(bytes.data(), bytes.size());
}

uint64_t ChecksumRanges(const std::byte* base, std::span<const ArenaRange> ranges) {
  if (ranges.size() == 1) {
    return STRATA_XXH3(XXH3_64bits)(base + ranges[0].offset, ranges[0].size_bytes);
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const ArenaRange& range : ranges) {
    STRATA_XXH3(XXH3_64bits_update)(&state, base + range.offset, range.size_bytes);
  }
  return XXH3_64bits_digest(&state);
}

struct ChecksumStream::State {
  XXH3_state_t xxh;
};

ChecksumStream::ChecksumStream() : state_(std::make_unique<State>()) {
  XXH3_64bits_reset(&state_->xxh);
}

ChecksumStream::~ChecksumStream() = default;

void ChecksumStream::Update(std::span<const std::byte> bytes) {
  STRATA_XXH3(XXH3_64bits_update)(&state_->xxh, bytes.data(), bytes.size());
}

uint64_t ChecksumStream::Digest() const { return XXH3_64bits_digest(&state_->xxh); }

void PayloadView::CopyTo(std::span<std::byte> dst) const {
  STRATA_CHECK_MSG(dst.size() == size_bytes_, "PayloadView::CopyTo: destination size mismatch");
  std::byte* out = dst.data();
  for (const ArenaRange& range : ranges_) {
    std::memcpy(out, base_ + range.offset, range.size_bytes);
    out += range.size_bytes;
  }
}

void MutablePayloadView::CopyFrom(std::span<const std::byte> src) const {
  STRATA_CHECK_MSG(src.size() == size_bytes_, "MutablePayloadView::CopyFrom: source size mismatch");
  const std::byte* in = src.data();
  for (const ArenaRange& range : ranges_) {
    std::memcpy(base_ + range.offset, in, range.size_bytes);
    in += range.size_bytes;
  }
}

}  // namespace strata::storage
