// What the CPU this process runs on offers beyond the baseline the build targets, for the CPU
// paths of the kernels' references and of other hot loops (quant.cc, storage/codec/kv_error.cc).
// Probed once, on first use; thread-safe.
#pragma once

namespace strata::kernels {

// True on x86-64 CPUs with AVX2 and F16C (fp16 <-> fp32 conversion instructions): the paths
// compiled with [[gnu::target("avx2,f16c")]] may run. False elsewhere.
bool HasAvx2F16c();
// True on x86-64 CPUs with AVX-512F whose operating system saves its registers: the paths
// compiled with [[gnu::target("avx512f")]] may run. False elsewhere.
bool HasAvx512f();

}  // namespace strata::kernels
