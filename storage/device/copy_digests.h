// CopyDigests: xxh3-64 digests (seed 0) that a stream computes over the bytes it copies
// (DeviceStream::CopyDigested), so a reader verifies a chunk's checksum in the same pass over
// memory as its copy instead of in a second one.
//
// Not thread-safe: a stream updates each digest from one thread at a time; read a digest only
// once an event recorded after the copies that feed it has completed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace strata::storage {

class CopyDigests {
 public:
  // `count` digests, each of no bytes yet.
  explicit CopyDigests(size_t count);
  ~CopyDigests();
  CopyDigests(const CopyDigests&) = delete;
  CopyDigests& operator=(const CopyDigests&) = delete;

  size_t size() const { return count_; }
  // Folds `size` bytes into digest `index` (< size()), after the bytes folded so far.
  void Update(size_t index, const void* bytes, size_t size);
  // xxh3-64 of every byte folded into digest `index`, in order.
  uint64_t Digest(size_t index) const;

 private:
  struct States;
  size_t count_;
  std::unique_ptr<States> states_;
};

}  // namespace strata::storage
