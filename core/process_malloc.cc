#include "core/process_malloc.h"

#include <malloc.h>

namespace strata {

void TuneMallocForLargeBuffers() {
  // Chunk-sized buffers (disk staging, promotions, compaction) come and go on many threads.
  // glibc raises its mmap threshold past them after the first frees, then serves them from
  // per-thread arenas that keep what was freed: the soak saw 2 GB of free memory held this way
  // (tests/soak). A fixed threshold (which also stops glibc moving it) maps each allocation of
  // 256 KiB or more on its own and unmaps it when freed.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  // The fixed threshold also pins glibc's trim threshold at 128 KiB: a request of 128 KiB or so
  // (a Lookup of a 32K-token prompt) freed at the top of an arena handed its pages back and faulted
  // them in again on the next call (Lookups by tokens at 0.30x a trivial call's rate; 0.59-0.71x
  // with 4 MiB). An arena keeps at most this much free at its top.
  mallopt(M_TRIM_THRESHOLD, 4 << 20);
}

}  // namespace strata
