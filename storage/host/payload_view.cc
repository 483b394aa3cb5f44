#include "storage/host/payload_view.h"

#include <cstring>

#include "core/check.h"
#include "core/xxh3_dispatch.h"

namespace strata::storage {

uint64_t ChecksumBytes(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

uint64_t ChecksumRanges(const std::byte* base, std::span<const ArenaRange> ranges) {
  if (ranges.size() == 1) {
    return XXH3_64bits(base + ranges[0].offset, ranges[0].size_bytes);
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  for (const ArenaRange& range : ranges) {
    XXH3_64bits_update(&state, base + range.offset, range.size_bytes);
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
  XXH3_64bits_update(&state_->xxh, bytes.data(), bytes.size());
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
