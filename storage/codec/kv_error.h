// How far a decoded chunk lies from the chunk it was encoded from: the error statistics Compress
// reports per chunk and the codec tests and benchmarks check (ALGORITHMS.md section 5).
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>

#include "core/kv_layout.h"

namespace strata::storage {

// Element i of a payload in `dtype` (a floating dtype: fp16, bf16 or fp32), as fp32.
float ElementAt(KvDtype dtype, std::span<const std::byte> payload, uint64_t i);

// Errors of `decoded` against `original` (payloads of one floating dtype and the same size):
// ||x - y||_F / ||x||_F over all elements (||x - y||_F when x is all zeros), and max |x - y|.
struct KvError {
  double relative_frobenius = 0;
  double max_abs = 0;
};
// On x86-64 CPUs with AVX2 and F16C it runs four elements at a time, with the result of the
// baseline path bit for bit.
KvError CompareKv(KvDtype dtype, std::span<const std::byte> original,
                  std::span<const std::byte> decoded);

namespace internal {
// CompareKv on the baseline CPU path whatever the CPU offers (for tests).
KvError CompareKvBaseline(KvDtype dtype, std::span<const std::byte> original,
                          std::span<const std::byte> decoded);
}  // namespace internal

}  // namespace strata::storage
