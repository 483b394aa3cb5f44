#include "kernels/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace strata::kernels {
namespace {

bool Probe() {
#if defined(__x86_64__)
  // F16C is CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not name it).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  return f16c && __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

}  // namespace

bool HasAvx2F16c() {
  static const bool has = Probe();
  return has;
}

bool HasAvx512f() {
#if defined(__x86_64__)
  // libgcc's probe also checks XCR0, that the kernel saves the AVX-512 state.
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

}  // namespace strata::kernels
