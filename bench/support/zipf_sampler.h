// ZipfSampler draws popularity ranks for the synthetic workloads (trace/synthetic_traces.h,
// strata-bench pic): ranks 0..n-1 with P(k) proportional to 1 / (k + 1)^s. Immutable after
// construction: thread-safe to share; the caller's generator carries the state.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace strata::bench {

class ZipfSampler {
 public:
  // n > 0 ranks; s >= 0 (0: uniform).
  ZipfSampler(uint32_t n, double s) : cumulative_(n) {
    double sum = 0;
    for (uint32_t k = 0; k < n; ++k) cumulative_[k] = sum += 1.0 / std::pow(k + 1.0, s);
    for (double& c : cumulative_) c /= sum;
  }
  uint32_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const auto rank = static_cast<uint32_t>(
        std::lower_bound(cumulative_.begin(), cumulative_.end(), u) - cumulative_.begin());
    return std::min(rank, static_cast<uint32_t>(cumulative_.size() - 1));
  }

 private:
  std::vector<double> cumulative_;
};

}  // namespace strata::bench
