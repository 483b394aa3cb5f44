#include "storage/codec/kv_error.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/dtype.h"

namespace strata::storage {

float ElementAt(KvDtype dtype, std::span<const std::byte> payload, uint64_t i) {
  return kernels::DispatchFloatDtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    T value;
    std::memcpy(&value, payload.data() + i * sizeof(T), sizeof(T));
    return kernels::ToFloat(value);
  });
}

KvError CompareKv(KvDtype dtype, std::span<const std::byte> original,
                  std::span<const std::byte> decoded) {
  STRATA_CHECK(original.size() == decoded.size());
  const uint64_t n = original.size() / DtypeSizeBytes(dtype);
  double err2 = 0, norm2 = 0;
  KvError error;
  for (uint64_t i = 0; i < n; ++i) {
    const double x = ElementAt(dtype, original, i);
    const double d = x - ElementAt(dtype, decoded, i);
    err2 += d * d;
    norm2 += x * x;
    error.max_abs = std::max(error.max_abs, std::fabs(d));
  }
  error.relative_frobenius = norm2 > 0 ? std::sqrt(err2 / norm2) : std::sqrt(err2);
  return error;
}

}  // namespace strata::storage
