// Process-wide tuning of glibc's allocator for Strata's binaries, stratad and strata-controller,
// whose requests and buffers of 100 KiB to a few MiB come and go on many threads.
#pragma once

namespace strata {

// Fixes glibc's mmap threshold at 256 KiB and its trim threshold at 4 MiB (reasons in the .cc).
// Call once at the start of main, before any thread starts.
void TuneMallocForLargeBuffers();

}  // namespace strata
