// Invariant checks. STRATA_CHECK aborts with the failed condition and its location when the
// condition is false; STRATA_DCHECK does the same in debug builds only (NDEBUG compiles it out,
// without evaluating the condition). For broken invariants only: never for bad input or
// hardware errors, which are absl::Status values.
#pragma once

namespace strata::internal {
[[noreturn]] void CheckFailed(const char* condition, const char* message, const char* file,
                              int line);
}  // namespace strata::internal

#define STRATA_CHECK_MSG(cond, message)                                      \
  do {                                                                       \
    if (!(cond)) [[unlikely]]                                                \
      ::strata::internal::CheckFailed(#cond, (message), __FILE__, __LINE__); \
  } while (false)

#define STRATA_CHECK(cond) STRATA_CHECK_MSG(cond, "")

#ifdef NDEBUG
#define STRATA_DCHECK(cond) \
  do {                      \
  } while (false && (cond))
#else
#define STRATA_DCHECK(cond) STRATA_CHECK(cond)
#endif
