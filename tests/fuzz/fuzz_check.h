// FUZZ_CHECK: an invariant a fuzz target asserts. A failure prints the condition and aborts, which
// libFuzzer reports as a crash (the input is saved as crash-<sha1>). Header-only.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
