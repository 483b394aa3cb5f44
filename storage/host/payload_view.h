// Views of a chunk's payload, which lies in the shared arena as one or more byte ranges (one per
// extent of its pages, the last one trimmed to the chunk's size). The payload is the
// concatenation of the ranges in order. Views own nothing: they are valid while whatever handed
// them out (a ChunkLease, a WriteReservation, an EvictionListener call) is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace strata::storage {

// `size_bytes` bytes at `offset` from the start of the arena.
struct ArenaRange {
  uint64_t offset = 0;
  uint64_t size_bytes = 0;

  friend bool operator==(const ArenaRange&, const ArenaRange&) = default;
};

using ArenaRangeList = std::vector<ArenaRange>;

// xxh3-64 (seed 0) of the concatenation of `ranges` of the arena at `base`.
uint64_t ChecksumRanges(const std::byte* base, std::span<const ArenaRange> ranges);

// xxh3-64 (seed 0) of `bytes`: equal to ChecksumRanges over the same bytes however split.
uint64_t ChecksumBytes(std::span<const std::byte> bytes);

// xxh3-64 (seed 0) of bytes fed in pieces: equal to ChecksumBytes of their concatenation. For
// payloads that arrive in several buffers (disk reads). Not thread-safe.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;

  void Update(std::span<const std::byte> bytes);
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A read-only view of a payload.
class PayloadView {
 public:
  PayloadView(const std::byte* arena_base, std::span<const ArenaRange> ranges, uint64_t size_bytes)
      : base_(arena_base), ranges_(ranges), size_bytes_(size_bytes) {}

  uint64_t size_bytes() const { return size_bytes_; }
  std::span<const ArenaRange> ranges() const { return ranges_; }
  std::span<const std::byte> range_bytes(size_t i) const {
    return {base_ + ranges_[i].offset, static_cast<size_t>(ranges_[i].size_bytes)};
  }
  // Copies the payload into `dst`, which must be exactly size_bytes() long (STRATA_CHECK).
  void CopyTo(std::span<std::byte> dst) const;
  // xxh3-64 of the payload.
  uint64_t Checksum() const { return ChecksumRanges(base_, ranges_); }

 private:
  const std::byte* base_;
  std::span<const ArenaRange> ranges_;
  uint64_t size_bytes_;
};

// A writable view of a payload.
class MutablePayloadView {
 public:
  MutablePayloadView(std::byte* arena_base, std::span<const ArenaRange> ranges, uint64_t size_bytes)
      : base_(arena_base), ranges_(ranges), size_bytes_(size_bytes) {}

  uint64_t size_bytes() const { return size_bytes_; }
  std::span<const ArenaRange> ranges() const { return ranges_; }
  std::span<std::byte> range_bytes(size_t i) const {
    return {base_ + ranges_[i].offset, static_cast<size_t>(ranges_[i].size_bytes)};
  }
  // Copies `src`, which must be exactly size_bytes() long (STRATA_CHECK), into the payload.
  void CopyFrom(std::span<const std::byte> src) const;

 private:
  std::byte* base_;
  std::span<const ArenaRange> ranges_;
  uint64_t size_bytes_;
};

}  // namespace strata::storage
