// StreamingCopy: memcpy for copies headed to DRAM. A plain memcpy below glibc's non-temporal
// threshold (a few MiB) reads every destination cache line before overwriting it; a layer of a
// load is hundreds of 32 KiB runs, each far below that threshold, so half the memory traffic of
// a load would be those useless reads. StreamingCopy writes with non-temporal stores instead
// (AVX2 when the CPU has it, SSE2 otherwise; plain memcpy off x86-64).
//
// Non-temporal stores are weakly ordered: the thread that issued them must call
// StreamingCopyFence() before it tells another thread that the bytes are there.
#pragma once

#include <cstddef>

namespace strata::storage {

// Copies `size` bytes from `src` to `dst` (ranges must not overlap), bypassing the cache for the
// destination's aligned body.
void StreamingCopy(void* dst, const void* src, size_t size);

// Orders this thread's earlier StreamingCopy stores before its later stores (sfence).
void StreamingCopyFence();

}  // namespace strata::storage
