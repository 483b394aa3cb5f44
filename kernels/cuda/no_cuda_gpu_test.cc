// Built instead of the CUDA kernel tests when STRATA_WITH_CUDA is off, so the `gpu` label never
// passes silently: it reports a skip with the reason.
#include "gtest/gtest.h"

namespace strata::kernels {
namespace {

TEST(KernelsGpuTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without CUDA (STRATA_WITH_CUDA=OFF): the CUDA kernels were not compiled";
}

}  // namespace
}  // namespace strata::kernels
