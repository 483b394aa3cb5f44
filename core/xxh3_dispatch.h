// <xxhash.h> for code that hashes bulk bytes (chunk payloads): on x86-64 the XXH3 calls are
// routed to libxxhash's runtime-dispatched versions, which use AVX2 or AVX-512 where the CPU has
// them (the plain ones are built for SSE2 only, about half the speed). Same results either way.
// XXH3_state_t is visible (XXH_STATIC_LINKING_ONLY). Link PkgConfig::XXHASH.
#pragma once

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>
#endif
