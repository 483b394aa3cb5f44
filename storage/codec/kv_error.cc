#include "storage/codec/kv_error.h"

#include <algorithm>
#include <array>
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
  // Sums in kLanes interleaved partial sums (element i into lane i % kLanes), added up at the end:
  // kLanes independent chains of additions instead of one.
  constexpr uint64_t kLanes = 4;
  std::array<double, kLanes> err2{}, norm2{};
  KvError error;
  kernels::DispatchFloatDtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto element = [](std::span<const std::byte> payload, uint64_t i) {
      T value;
      std::memcpy(&value, payload.data() + i * sizeof(T), sizeof(T));
      return static_cast<double>(kernels::ToFloat(value));
    };
    const auto add = [&](uint64_t i, uint64_t lane) {
      const double x = element(original, i);
      const double d = x - element(decoded, i);
      err2[lane] += d * d;
      norm2[lane] += x * x;
      error.max_abs = std::max(error.max_abs, std::fabs(d));
    };
    uint64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (uint64_t lane = 0; lane < kLanes; ++lane) add(i + lane, lane);
    }
    for (; i < n; ++i) add(i, i % kLanes);
  });
  double err2_sum = 0, norm2_sum = 0;
  for (uint64_t lane = 0; lane < kLanes; ++lane) {
    err2_sum += err2[lane];
    norm2_sum += norm2[lane];
  }
  error.relative_frobenius = norm2_sum > 0 ? std::sqrt(err2_sum / norm2_sum) : std::sqrt(err2_sum);
  return error;
}

}  // namespace strata::storage
